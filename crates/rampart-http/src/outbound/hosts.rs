//! The bounded host table: one breaker and one retry budget per `host:port`, in a
//! [`KeyedTable`] (at most `max_hosts` hosts, a host not seen lately evicted for a new one by
//! CLOCK, see [`rampart::keyed`]).
//!
//! A lookup through the table takes its read lock, finds the host, marks it used (a store
//! only when the mark was clear) and clones its `Arc`: no write lock, no shared counter. A
//! service that calls the same host again reuses the host it kept, without the table at all,
//! until the table evicts a host: every eviction bumps the table's epoch (from the table's
//! `on_evict` hook, on the cold path of the request that brought a new host), and a kept host
//! whose epoch is older is looked up again, which marks it used for the next pass of the
//! CLOCK hand and finds out whether it was the one evicted. So a host in steady use through
//! kept entries keeps its second chance, and a kept host is never used after the table let it
//! go for longer than one request.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::uri::{Authority, Scheme};
use http::{HeaderMap, Uri};
use rampart::keyed::KeyedTable;

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
        let default_port = default_port(uri);
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

/// The port of a URI that names none: 443 for `https`, else 80.
fn default_port(uri: &Uri) -> u16 {
    if uri.scheme() == Some(&Scheme::HTTPS) {
        443
    } else {
        80
    }
}

/// Whether `key`, a key [`HostKey::of`] made for some URI, is the one it makes for `uri`,
/// told without making it: the URI's authority is the key byte for byte, or is the key less
/// its scheme's default port (`svc` for `svc:80` on `http`). `false` for any other form (the
/// key is then made and compared), so a `true` is always right.
pub(crate) fn is_key_of(key: &str, uri: &Uri) -> bool {
    let Some(authority) = uri.authority() else {
        return false;
    };
    // A key has no uppercase letter and no user info, and ends in `:port`: equal bytes are
    // the same key, and a host without a port gets its scheme's default.
    match key.strip_prefix(authority.as_str()) {
        Some("") => true,
        Some(rest) => {
            rest.strip_prefix(':').and_then(|port| port.parse().ok()) == Some(default_port(uri))
        }
        None => false,
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

/// At most `max` hosts, each an `Arc<T>` shared with the requests in flight to it.
pub(crate) struct Hosts<T> {
    table: KeyedTable<Box<str>, Arc<T>>,
    /// Hosts evicted so far: a kept host from an earlier epoch is looked up again.
    evictions: Arc<AtomicU64>,
}

/// A host a service keeps for its next request, with the table's epoch when it was last
/// marked used there.
pub(crate) struct Kept<T> {
    host: Arc<T>,
    epoch: u64,
}

/// The epoch of a host just inserted: its CLOCK mark starts clear (a host seen once goes
/// first), so its next request is looked up in the table and marks it.
const UNMARKED: u64 = u64::MAX;

impl<T> Hosts<T> {
    /// A table of at most `max` hosts (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        let evictions = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&evictions);
        let table = KeyedTable::builder()
            .capacity(max.max(1))
            .on_evict(move |_, _| {
                counted.fetch_add(1, Ordering::Release);
            })
            .build()
            .unwrap_or_else(|e| unreachable!("a capacity of at least 1 is valid: {e}"));
        Hosts { table, evictions }
    }

    /// The host `key`, made by `make` if the table has none (it marks the host used).
    pub(crate) fn get<E>(
        &self,
        key: &str,
        make: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        self.table
            .get_or_try_insert_with(key, |key| make(key).map(Arc::new))
    }

    /// The host `key` for a service that kept `last`: the kept host itself when it is
    /// `key`'s (`is_key`) and no host was evicted since it was marked, else the table's
    /// (made by `make` if it has none), which the service keeps instead.
    pub(crate) fn get_kept<E>(
        &self,
        last: &mut Option<Kept<T>>,
        key: &str,
        is_key: impl FnOnce(&T) -> bool,
        make: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if let Some(host) = self.kept(last, is_key) {
            return Ok(host);
        }
        // Read before the lookup: an eviction after it shows at the next request.
        let epoch = self.evictions.load(Ordering::Acquire);
        let mut made = false;
        let host = self.get(key, |key| {
            made = true;
            make(key)
        })?;
        *last = Some(Kept {
            host: Arc::clone(&host),
            epoch: if made { UNMARKED } else { epoch },
        });
        Ok(host)
    }

    /// The kept host itself, when `is_key` says it is the one wanted and no host was
    /// evicted since it was marked: what [`get_kept`](Self::get_kept) answers first, for a
    /// caller that can tell without making the key.
    pub(crate) fn kept(
        &self,
        last: &Option<Kept<T>>,
        is_key: impl FnOnce(&T) -> bool,
    ) -> Option<Arc<T>> {
        let kept = last.as_ref()?;
        (kept.epoch == self.evictions.load(Ordering::Acquire) && is_key(&kept.host))
            .then(|| Arc::clone(&kept.host))
    }

    /// The host `key`, if the table has it; it is not marked used.
    pub(crate) fn peek(&self, key: &str) -> Option<Arc<T>> {
        self.table.peek(key)
    }

    /// Every host in the table now (none is marked used).
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        let keys = self.table.keys();
        keys.iter().filter_map(|key| self.table.peek(key)).collect()
    }

    /// Hosts in the table.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
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
    fn is_key_of_is_true_only_for_the_key_the_uri_makes() {
        let uris = [
            "http://example.com/a",
            "http://Example.COM/a",
            "https://example.com/a",
            "https://example.com:443/a",
            "http://example.com:443/a",
            "http://user@127.0.0.1:8080/",
            "http://127.0.0.1:8080/",
            "http://[::1]:9/",
            "http://[::1]/",
            "https://[::1]/",
            "http://svc:8080/",
            "http://svc:80/",
            "http://SVC:8080/",
            "http://svc:/",
            "/relative",
        ];
        let keys = [
            "example.com:80",
            "example.com:443",
            "127.0.0.1:8080",
            "[::1]:9",
            "[::1]:80",
            "[::1]:443",
            "svc:8080",
            "svc:80",
            "other.test:9000",
            "",
        ];
        // A `Host` header is not read when the URI has an authority, by either.
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::HOST,
            "other.test:9000".parse().expect("valid"),
        );
        let mut fast = 0;
        for uri in uris {
            let parsed: Uri = uri.parse().expect("valid uri");
            let made = HostKey::of(&parsed, &headers);
            for key in keys {
                let told = is_key_of(key, &parsed);
                assert!(
                    !told || made.as_str() == key,
                    "{uri} told as {key}, its key is {}",
                    made.as_str()
                );
                fast += usize::from(told);
            }
        }
        // Every URI with an authority in lowercase, no user info and a port that is not empty
        // is told at once: 10 of the 15 (not `http://svc:/`, whose key is made, nor
        // `/relative`, which has no authority and whose key comes from its `Host` header).
        assert_eq!(fast, 10);
    }

    fn made(table: &Hosts<String>, last: &mut Option<Kept<String>>, key: &str) -> bool {
        let made = std::cell::Cell::new(false);
        table
            .get_kept(
                last,
                key,
                |host| host == key,
                |key| {
                    made.set(true);
                    Ok::<_, ()>(key.to_owned())
                },
            )
            .expect("made");
        made.get()
    }

    #[test]
    fn a_kept_host_is_reused_and_looked_up_again_after_an_eviction() {
        let table = Hosts::new(1);
        let mut last = None;
        assert!(made(&table, &mut last, "a"));
        assert!(!made(&table, &mut last, "a"));
        let kept = last.as_ref().map(|k| Arc::clone(&k.host)).expect("kept");
        assert!(made(&table, &mut None, "b"), "b evicts a");
        assert!(
            made(&table, &mut last, "a"),
            "a is made again, not the kept one used"
        );
        let now = last.as_ref().map(|k| Arc::clone(&k.host)).expect("kept");
        assert!(!Arc::ptr_eq(&kept, &now));
    }

    #[test]
    fn a_host_used_through_its_kept_entry_keeps_its_second_chance() {
        let table = Hosts::new(2);
        let mut a = None;
        for _ in 0..5 {
            made(&table, &mut a, "a");
        }
        assert!(made(&table, &mut None, "b"));
        assert!(
            made(&table, &mut None, "c"),
            "c evicts b, seen once; a gets a second chance"
        );
        assert_eq!(table.len(), 2);
        assert!(table.peek("a").is_some() && table.peek("b").is_none());
        assert!(!made(&table, &mut a, "a"), "still a's own, marked again");
        assert!(made(&table, &mut None, "d"), "d evicts c");
        assert!(table.peek("a").is_some() && table.peek("c").is_none());
    }
}
