//! The bounded host table: one breaker and one retry budget per `host:port`, the least
//! recently seen host evicted when the table is full.
//!
//! A lookup takes a read lock and, only when the host was not already the most recently seen
//! one, writes its recency; a new host takes the write lock once. A service that calls the
//! same host again reuses the entry it kept (while the table has not evicted it), without the
//! lock. Eviction scans the table
//! (at most `max` entries), and only when a new host arrives at a full table.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use http::uri::{Authority, Scheme};
use http::{HeaderMap, Uri};

/// The key of a host: `host:port`, the host in lowercase, the port explicit (80 for `http`,
/// 443 for `https` when the URI has none). Borrowed from the URI when it is already in that
/// form (the common case), else built on the stack for any real host name.
#[allow(clippy::large_enum_variant)] // lives on the stack for one lookup; a box would allocate
pub(crate) enum HostKey<'a> {
    Borrowed(&'a str),
    Inline { buf: [u8; INLINE], len: usize },
    Long(String),
}

/// A DNS name is at most 253 bytes; with brackets, a colon and five digits this fits them all.
const INLINE: usize = 264;

impl<'a> HostKey<'a> {
    /// The key of a request: its URI's authority, else its `Host` header; requests with
    /// neither (a relative URI, as a tonic channel's inner requests have) share the key `""`
    /// unless their service names one (`OutboundLayer::layer_for`).
    pub(crate) fn of(uri: &'a Uri, headers: &HeaderMap) -> HostKey<'a> {
        let default_port = if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        };
        if let Some(authority) = uri.authority() {
            if let Some(key) = as_key(authority.as_str()) {
                return HostKey::Borrowed(key);
            }
            return HostKey::new(
                authority.host(),
                authority.port_u16().unwrap_or(default_port),
            );
        }
        let from_header = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.parse::<Authority>().ok());
        match from_header {
            Some(authority) => HostKey::new(
                authority.host(),
                authority.port_u16().unwrap_or(default_port),
            ),
            None => HostKey::Borrowed(""),
        }
    }

    /// The key a user names (`layer_for`, `host`, `breaker`) in the form the layer makes
    /// from URIs: `Inventory:3001` is `inventory:3001`, and `reports.internal` (no port) is
    /// `reports.internal:80`. A name that is not an authority is kept, lowercased.
    pub(crate) fn named(key: &str) -> String {
        match key.parse::<Authority>() {
            Ok(authority) if !key.is_empty() => {
                HostKey::new(authority.host(), authority.port_u16().unwrap_or(80))
                    .as_str()
                    .to_owned()
            }
            _ => key.to_ascii_lowercase(),
        }
    }

    pub(crate) fn new(host: &str, port: u16) -> HostKey<'static> {
        if host.len() + 6 > INLINE {
            let mut long = host.to_ascii_lowercase();
            let _ = write!(long, ":{port}");
            return HostKey::Long(long);
        }
        let mut buf = [0; INLINE];
        for (slot, b) in buf.iter_mut().zip(host.bytes()) {
            *slot = b.to_ascii_lowercase();
        }
        let mut len = host.len();
        buf[len] = b':';
        len += 1;
        let mut digits = [0u8; 5];
        let mut n = port;
        let mut count = 0;
        loop {
            digits[count] = b'0' + (n % 10) as u8;
            count += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &d in digits[..count].iter().rev() {
            buf[len] = d;
            len += 1;
        }
        HostKey::Inline { buf, len }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            HostKey::Borrowed(key) => key,
            HostKey::Long(long) => long,
            // Built from a `&str` by ASCII lowercasing and ASCII digits: always UTF-8.
            HostKey::Inline { buf, len } => std::str::from_utf8(&buf[..*len]).unwrap_or_default(),
        }
    }
}

/// `authority` itself when it already is a key: `host:port` with an explicit port, no user
/// info and no uppercase letter.
fn as_key(authority: &str) -> Option<&str> {
    let bytes = authority.as_bytes();
    let colon = bytes.iter().rposition(|&b| b == b':')?;
    let port = &bytes[colon + 1..];
    let port_ok = (1..=5).contains(&port.len()) && port.iter().all(u8::is_ascii_digit);
    let host_ok = !bytes[..colon]
        .iter()
        .any(|&b| b == b'@' || b.is_ascii_uppercase());
    (port_ok && host_ok).then_some(authority)
}

/// An entry: what the table keeps per host, with its recency.
pub(crate) struct Entry<T> {
    pub(crate) value: T,
    seen: AtomicU64,
    /// Set when the table evicts the entry: a holder that kept it must look the host up
    /// again.
    evicted: AtomicBool,
}

impl<T> Entry<T> {
    /// Whether the entry is still the table's.
    pub(crate) fn is_current(&self) -> bool {
        !self.evicted.load(Ordering::Relaxed)
    }
}

/// At most `max` hosts; the least recently seen is evicted for a new one.
pub(crate) struct HostTable<T> {
    max: usize,
    clock: AtomicU64,
    map: RwLock<HashMap<Box<str>, Arc<Entry<T>>>>,
}

impl<T> HostTable<T> {
    pub(crate) fn new(max: usize) -> Self {
        HostTable {
            max: max.max(1),
            clock: AtomicU64::new(0),
            map: RwLock::new(HashMap::new()),
        }
    }

    /// The entry for `key`, made by `make` if the table has none.
    pub(crate) fn get<E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<Entry<T>>, E> {
        let found = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned();
        if let Some(entry) = found {
            self.touch(&entry);
            return Ok(entry);
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get(key) {
            self.touch(entry);
            return Ok(Arc::clone(entry));
        }
        let entry = Arc::new(Entry {
            value: make()?,
            seen: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
        });
        if map.len() >= self.max {
            let oldest = map
                .iter()
                .min_by_key(|(_, e)| e.seen.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            if let Some(evicted) = oldest.and_then(|oldest| map.remove(&oldest)) {
                evicted.evicted.store(true, Ordering::Relaxed);
            }
        }
        self.touch(&entry);
        map.insert(Box::from(key), Arc::clone(&entry));
        Ok(entry)
    }

    /// The entry for `key`, if the table has one; its recency is left as it was.
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<Entry<T>>> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Marks `entry` the most recently seen: a write only when it was not already.
    pub(crate) fn touch(&self, entry: &Entry<T>) {
        let now = self.clock.load(Ordering::Relaxed);
        if now == 0 || entry.seen.load(Ordering::Relaxed) != now {
            let next = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
            entry.seen.store(next, Ordering::Relaxed);
        }
    }

    /// Hosts in the table.
    pub(crate) fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uri: &str) -> String {
        let uri: Uri = uri.parse().expect("valid uri");
        HostKey::of(&uri, &HeaderMap::new()).as_str().to_owned()
    }

    #[test]
    fn keys_are_lowercase_host_and_explicit_port() {
        assert_eq!(key("http://Example.COM/a"), "example.com:80");
        assert_eq!(key("https://example.com/a"), "example.com:443");
        assert_eq!(key("http://user@127.0.0.1:8080/"), "127.0.0.1:8080");
        assert_eq!(key("http://[::1]:9/"), "[::1]:9");
        assert_eq!(key("http://[::1]/"), "[::1]:80");
        assert_eq!(key("http://svc:8080/"), "svc:8080");
        assert_eq!(key("http://SVC:8080/"), "svc:8080");
        assert_eq!(key("/relative"), "");
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::HOST,
            "svc.internal:7000".parse().expect("valid"),
        );
        let uri: Uri = "/path".parse().expect("valid uri");
        assert_eq!(HostKey::of(&uri, &headers).as_str(), "svc.internal:7000");
    }

    #[test]
    fn an_evicted_entry_says_so_to_whoever_kept_it() {
        let table = HostTable::new(1);
        let kept = table.get("a", || Ok::<_, ()>(1)).expect("made");
        assert!(kept.is_current());
        table.get("b", || Ok::<_, ()>(2)).expect("made");
        assert!(!kept.is_current(), "a was evicted for b");
    }

    #[test]
    fn the_least_recently_seen_host_is_evicted() {
        let table = HostTable::new(2);
        let made = std::cell::Cell::new(0);
        let get = |k: &str| {
            table
                .get(k, || {
                    made.set(made.get() + 1);
                    Ok::<_, ()>(k.to_owned())
                })
                .expect("made")
        };
        get("a");
        get("b");
        get("a");
        get("c"); // evicts b
        assert_eq!(table.len(), 2);
        assert_eq!(made.get(), 3);
        get("a");
        assert_eq!(made.get(), 3, "a was kept");
        get("b");
        assert_eq!(made.get(), 4, "b was evicted and made again");
    }
}
