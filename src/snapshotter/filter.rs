//! filter: containerd's filter syntax (`github.com/containerd/containerd/filters`) for List/Walk,
//! e.g. `labels."containerd.io/snapshot.ref"==sha256:..,parent==x` or `kind==committed`.
//! A request's filters are OR-ed; the selectors inside one filter are AND-ed. Written by hand
//! because no crate implements containerd's grammar (quoted field paths, `/regex/` values,
//! Go escape sequences); it follows containerd's scanner rune classes.
use regex::Regex;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter {input:?} at byte {pos}: {msg}")]
pub struct FilterError {
    pub input: String,
    pub pos: usize,
    pub msg: String,
}

#[derive(Debug, Clone)]
enum Op {
    Present,
    Eq(String),
    Ne(String),
    Matches(Regex),
}

#[derive(Debug, Clone)]
struct Selector {
    path: Vec<String>,
    op: Op,
}

/// One parsed filter: all selectors must match.
#[derive(Debug, Clone)]
pub struct Filter(Vec<Selector>);

/// Gives a field's value (None when absent) for a field path.
pub trait Adaptor {
    fn field(&self, path: &[String]) -> Option<String>;
}

impl Filter {
    pub fn parse(input: &str) -> Result<Filter, FilterError> {
        Parser { input, chars: input.char_indices().collect(), i: 0 }.filters()
    }

    pub fn matches(&self, a: &dyn Adaptor) -> bool {
        self.0.iter().all(|s| {
            let v = a.field(&s.path);
            match &s.op {
                Op::Present => v.is_some(),
                Op::Eq(x) => v.as_deref() == Some(x.as_str()),
                Op::Ne(x) => v.as_deref().unwrap_or("") != x,
                Op::Matches(re) => re.is_match(v.as_deref().unwrap_or("")),
            }
        })
    }

    /// The value this filter requires by equality for a field path `is_field` accepts, if it
    /// has such a selector: every match has that value, so a caller may look candidates up by it.
    pub fn required_eq(&self, is_field: impl Fn(&[String]) -> bool) -> Option<&str> {
        self.0.iter().find_map(|s| match &s.op {
            Op::Eq(v) if is_field(&s.path) => Some(v.as_str()),
            _ => None,
        })
    }
}

/// Parses every filter of a request; an empty list matches everything.
pub fn parse_all(filters: &[String]) -> Result<Vec<Filter>, FilterError> {
    filters.iter().filter(|f| !f.trim().is_empty()).map(|f| Filter::parse(f)).collect()
}

pub fn matches_any(filters: &[Filter], a: &dyn Adaptor) -> bool {
    filters.is_empty() || filters.iter().any(|f| f.matches(a))
}

struct Parser<'a> {
    input: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
}

fn is_field_char(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

fn is_value_char(c: char) -> bool {
    c != ',' && !c.is_whitespace() && !c.is_control()
}

impl Parser<'_> {
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, FilterError> {
        let pos = self.chars.get(self.i).map(|(p, _)| *p).unwrap_or(self.input.len());
        Err(FilterError { input: self.input.to_string(), pos, msg: msg.into() })
    }
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).map(|(_, c)| *c)
    }
    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }
    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
        self.chars[start..self.i].iter().map(|(_, c)| c).collect()
    }

    fn filters(mut self) -> Result<Filter, FilterError> {
        let mut sels = vec![self.selector()?];
        loop {
            self.skip_space();
            match self.peek() {
                None => return Ok(Filter(sels)),
                Some(',') => {
                    self.i += 1;
                    sels.push(self.selector()?);
                }
                Some(c) => return self.err(format!("unexpected {c:?}, expected ',' or end")),
            }
        }
    }

    fn selector(&mut self) -> Result<Selector, FilterError> {
        let path = self.fieldpath()?;
        self.skip_space();
        let op = match self.peek() {
            None | Some(',') => return Ok(Selector { path, op: Op::Present }),
            Some('=' | '!' | '~') => {
                let start = self.i;
                let op = self.take_while(|c| matches!(c, '=' | '!' | '~'));
                if !matches!(op.as_str(), "==" | "!=" | "~=") {
                    self.i = start;
                    return self.err(format!("unknown operator {op:?}"));
                }
                op
            }
            Some(c) => return self.err(format!("unexpected {c:?}, expected an operator")),
        };
        self.skip_space();
        let value = self.value(op == "~=")?;
        let op = match op.as_str() {
            "==" => Op::Eq(value),
            "!=" => Op::Ne(value),
            _ => match Regex::new(&value) {
                Ok(re) => Op::Matches(re),
                Err(e) => return self.err(format!("bad regular expression: {e}")),
            },
        };
        Ok(Selector { path, op })
    }

    fn fieldpath(&mut self) -> Result<Vec<String>, FilterError> {
        let mut path = vec![self.field()?];
        while self.peek() == Some('.') {
            self.i += 1;
            path.push(self.field()?);
        }
        Ok(path)
    }

    fn field(&mut self) -> Result<String, FilterError> {
        self.skip_space();
        match self.peek() {
            Some('"') => self.quoted('"'),
            Some(c) if is_field_char(c) => Ok(self.take_while(is_field_char)),
            Some(c) => self.err(format!("unexpected {c:?}, expected a field")),
            None => self.err("expected a field"),
        }
    }

    fn value(&mut self, alt_quotes: bool) -> Result<String, FilterError> {
        match self.peek() {
            Some('"') => self.quoted('"'),
            Some(q @ ('/' | '|')) if alt_quotes => self.quoted(q),
            Some(c) if is_value_char(c) => Ok(self.take_while(is_value_char)),
            _ => self.err("expected a value"),
        }
    }

    /// A quoted string with Go escapes (`\n`, `\"`, `\x41`, `\u00e9`, `\101`). Inside the
    /// regex quotes `/../` and `|..|` escapes other than the delimiter stay for the regex engine.
    fn quoted(&mut self, q: char) -> Result<String, FilterError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else { return self.err("quoted literal not terminated") };
            self.i += 1;
            match c {
                c if c == q => return Ok(out),
                '\n' => return self.err("quoted literal not terminated"),
                '\\' => {
                    let Some(e) = self.peek() else { return self.err("quoted literal not terminated") };
                    self.i += 1;
                    if e == q {
                        out.push(q);
                        continue;
                    }
                    if q != '"' {
                        out.push('\\');
                        out.push(e);
                        continue;
                    }
                    let simple = match e {
                        'a' => Some('\x07'),
                        'b' => Some('\x08'),
                        'f' => Some('\x0c'),
                        'n' => Some('\n'),
                        'r' => Some('\r'),
                        't' => Some('\t'),
                        'v' => Some('\x0b'),
                        '\\' => Some('\\'),
                        _ => None,
                    };
                    if let Some(s) = simple {
                        out.push(s);
                        continue;
                    }
                    let (base, n, mut digits) = match e {
                        '0'..='7' => (8, 3, e.to_string()),
                        'x' => (16, 2, String::new()),
                        'u' => (16, 4, String::new()),
                        'U' => (16, 8, String::new()),
                        _ => {
                            self.i -= 1;
                            return self.err("illegal escape sequence");
                        }
                    };
                    while digits.len() < n {
                        match self.peek() {
                            Some(d) if d.is_digit(base) => {
                                digits.push(d);
                                self.i += 1;
                            }
                            _ => return self.err("illegal numeric escape sequence"),
                        }
                    }
                    match u32::from_str_radix(&digits, base).ok().and_then(char::from_u32) {
                        Some(ch) => out.push(ch),
                        None => return self.err("escape is not a valid character"),
                    }
                }
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct M(HashMap<&'static str, &'static str>, HashMap<&'static str, &'static str>);
    impl Adaptor for M {
        fn field(&self, path: &[String]) -> Option<String> {
            match path.first()?.as_str() {
                "labels" => self.1.get(path[1..].join(".").as_str()).map(|s| s.to_string()),
                f => self.0.get(f).map(|s| s.to_string()),
            }
        }
    }
    fn snap() -> M {
        M(
            HashMap::from([("name", "a-wl"), ("parent", "p-wl"), ("kind", "active")]),
            HashMap::from([("l", "2"), ("containerd.io/snapshot.ref", "sha256:abc")]),
        )
    }
    fn m(f: &str) -> bool {
        Filter::parse(f).unwrap().matches(&snap())
    }

    #[test]
    fn containerd_forms() {
        assert!(m(r#"labels."containerd.io/snapshot.ref"==sha256:abc,parent==p-wl"#));
        assert!(!m(r#"labels."containerd.io/snapshot.ref"==sha256:abc,parent==other"#));
        assert!(m("labels.l==2,labels.\"containerd.io/snapshot.ref\"~=^sha256"));
        assert!(m("name==a-wl,labels.l"));
        assert!(!m("labels.nope"));
        assert!(m(r#"parent!="""#));
        assert!(m("labels.l==2"));
        assert!(!m("labels.l!=2"));
        assert!(m("kind==active"));
        assert!(m("name~=^a-"));
        assert!(m(r"name~=/^a-w[a-z]\z/"));
        assert!(m(r#"name==  "a-wl"  "#));
        assert!(m(r#"name=="a\x2dwl""#));
        assert!(m(r#"name=="a\055wl""#));
    }

    #[test]
    fn or_of_filters() {
        let fs = parse_all(&["name==x".to_string(), "name==a-wl".to_string()]).unwrap();
        assert!(matches_any(&fs, &snap()));
        assert!(matches_any(&[], &snap()));
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["name=", "name===x", "name=~x", "==x", r#"labels."unterminated==x"#, r#"name=="\q""#, "name==x,", ".name", "name~=(", "a b", r#"name=="\x4""#, "labels.containerd.io/snapshot.ref==x"] {
            assert!(Filter::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
