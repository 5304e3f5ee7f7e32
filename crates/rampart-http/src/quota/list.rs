//! The structured-field lists (RFC 9651) the `RateLimit` and `RateLimit-Policy` fields are
//! written in, read without allocating.

use super::integer;

/// One item of a `RateLimit` or `RateLimit-Policy` list: its name (a string's or token's
/// bytes as written) and the integer parameters the fields define.
#[derive(Debug, Default)]
pub(super) struct Item<'a> {
    pub(super) name: &'a [u8],
    pub(super) r: Option<u64>,
    pub(super) t: Option<u64>,
    pub(super) q: Option<u64>,
    pub(super) w: Option<u64>,
}

/// A structured-field list (RFC 9651) of items with parameters, read without allocating.
/// Inner lists are not items of these fields: a list with one does not parse.
pub(super) struct List<'a> {
    input: &'a [u8],
    at: usize,
}

impl<'a> List<'a> {
    pub(super) fn new(input: &'a [u8]) -> Self {
        List { input, at: 0 }
    }

    /// Calls `f` with each item when the whole field parses (read twice: once to check, once
    /// for `f`, so that nothing is kept); `false` when it does not, and the caller ignores
    /// the field.
    pub(super) fn each(self, mut f: impl FnMut(&Item<'a>)) -> bool {
        let input = self.input;
        if !List::new(input).walk(&mut |_| {}) {
            return false;
        }
        List::new(input).walk(&mut f)
    }

    fn walk(self, f: &mut dyn FnMut(&Item<'a>)) -> bool {
        self.members(|list| {
            let item = list.item()?;
            f(&item);
            Some(())
        })
    }

    /// Calls `f` with the key and the value of each member (`None` for a value that is not
    /// a non-negative integer, or none: a boolean true) when the whole field parses as a
    /// dictionary; `false` when it does not. Read twice, as [`each`](Self::each) is.
    pub(super) fn each_member(self, mut f: impl FnMut(&'a [u8], Option<u64>)) -> bool {
        let input = self.input;
        let walk = |f: &mut dyn FnMut(&'a [u8], Option<u64>)| {
            List::new(input).members(|list| {
                let (key, value) = list.member()?;
                f(key, value);
                Some(())
            })
        };
        walk(&mut |_, _| {}) && walk(&mut f)
    }

    /// Walks the comma-separated members of a list or dictionary, `member` reading each;
    /// `false` when one does not parse or the separators are wrong.
    fn members(mut self, mut member: impl FnMut(&mut Self) -> Option<()>) -> bool {
        self.skip(|b| b == b' ');
        if self.at == self.input.len() {
            return true;
        }
        loop {
            if member(&mut self).is_none() {
                return false;
            }
            self.skip(|b| b == b' ' || b == b'\t');
            match self.peek() {
                None => return true,
                Some(b',') => {
                    self.at += 1;
                    self.skip(|b| b == b' ' || b == b'\t');
                    if self.peek().is_none() {
                        return false; // a trailing comma
                    }
                }
                Some(_) => return false,
            }
        }
    }

    /// A dictionary member: a key, then `=` and a bare item (or nothing: true), then
    /// parameters, which these fields do not read.
    fn member(&mut self) -> Option<(&'a [u8], Option<u64>)> {
        let key = self.key()?;
        let value = if self.peek() == Some(b'=') {
            self.at += 1;
            match self.bare()? {
                Bare::Other(number) => number,
                Bare::Text(_) => None,
            }
        } else {
            None
        };
        while self.peek() == Some(b';') {
            self.at += 1;
            self.skip(|b| b == b' ');
            self.key()?;
            if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare()?;
            }
        }
        Some((key, value))
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    fn skip(&mut self, while_: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&while_) {
            self.at += 1;
        }
    }

    fn item(&mut self) -> Option<Item<'a>> {
        let name = match self.bare()? {
            Bare::Text(name) => name,
            Bare::Other(_) => &[],
        };
        let mut item = Item {
            name,
            ..Item::default()
        };
        while self.peek() == Some(b';') {
            self.at += 1;
            self.skip(|b| b == b' ');
            let key = self.key()?;
            let value = if self.peek() == Some(b'=') {
                self.at += 1;
                self.bare()?
            } else {
                Bare::Other(None) // a boolean true
            };
            let number = match value {
                Bare::Other(n) => n,
                Bare::Text(_) => None,
            };
            let slot = match key {
                b"r" => &mut item.r,
                b"t" => &mut item.t,
                b"q" => &mut item.q,
                b"w" => &mut item.w,
                _ => continue,
            };
            // A parameter of these names that is not a non-negative integer is malformed,
            // and so is the field. A later duplicate overrides, as RFC 9651 says.
            *slot = Some(number?);
        }
        Some(item)
    }

    /// A parameter key: `lcalpha / "*"` then `lcalpha / DIGIT / "_" / "-" / "." / "*"`.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        let first = self.peek()?;
        if !(first.is_ascii_lowercase() || first == b'*') {
            return None;
        }
        self.skip(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
        });
        Some(&self.input[start..self.at])
    }

    /// A bare item: a string or token (its bytes), a non-negative integer (its value), or
    /// another well-formed item (decimal, negative integer, byte sequence, boolean, date).
    fn bare(&mut self) -> Option<Bare<'a>> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => {
                self.at += 1;
                loop {
                    match self.peek()? {
                        b'"' => break,
                        b'\\' => {
                            self.at += 1;
                            if !matches!(self.peek()?, b'"' | b'\\') {
                                return None;
                            }
                        }
                        b' '..=b'~' => {}
                        _ => return None,
                    }
                    self.at += 1;
                }
                self.at += 1;
                Some(Bare::Text(&self.input[start + 1..self.at - 1]))
            }
            b if b.is_ascii_alphabetic() || b == b'*' => {
                self.skip(|b| b.is_ascii_alphanumeric() || b":/!#$%&'*+-.^_`|~".contains(&b));
                Some(Bare::Text(&self.input[start..self.at]))
            }
            b'-' | b'0'..=b'9' => {
                let negative = first == b'-';
                if negative {
                    self.at += 1;
                }
                let digits = self.at;
                self.skip(|b| b.is_ascii_digit());
                let whole = &self.input[digits..self.at];
                if whole.is_empty() || whole.len() > 15 {
                    return None;
                }
                if self.peek() == Some(b'.') {
                    self.at += 1;
                    let frac = self.at;
                    self.skip(|b| b.is_ascii_digit());
                    let frac = self.at - frac;
                    if whole.len() > 12 || !(1..=3).contains(&frac) {
                        return None;
                    }
                    return Some(Bare::Other(None));
                }
                Some(Bare::Other((!negative).then(|| integer(whole)).flatten()))
            }
            b':' => {
                self.at += 1;
                self.skip(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
                (self.peek()? == b':').then(|| {
                    self.at += 1;
                    Bare::Other(None)
                })
            }
            b'?' => {
                self.at += 1;
                matches!(self.peek()?, b'0' | b'1').then(|| {
                    self.at += 1;
                    Bare::Other(None)
                })
            }
            b'@' => {
                self.at += 1;
                match self.bare()? {
                    Bare::Other(_) => Some(Bare::Other(None)),
                    Bare::Text(_) => None,
                }
            }
            _ => None,
        }
    }
}

/// A bare item as these fields read it.
enum Bare<'a> {
    /// A string's (unescaped quotes excluded) or a token's bytes.
    Text(&'a [u8]),
    /// Any other item: `Some` for a non-negative integer.
    Other(Option<u64>),
}
