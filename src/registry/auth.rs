//! auth: `WWW-Authenticate` challenge parsing (RFC 7235 auth-params, as registries send them).
//! Hand-written: the crates for it are unmaintained or parse only Bearer; this one is small and
//! fuzzable, and refuses anything it does not understand.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Basic,
    Bearer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: Scheme,
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
    /// `error="insufficient_scope"` and the like, from a registry refusing a token.
    pub error: Option<String>,
}

/// Parses the first Basic or Bearer challenge of a header value; None when there is none or
/// it is malformed.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    if header.len() > 8192 {
        return None;
    }
    let header = header.trim();
    let (scheme, rest) = header.split_once(char::is_whitespace).unwrap_or((header, ""));
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "basic" => Scheme::Basic,
        "bearer" => Scheme::Bearer,
        _ => return None,
    };
    let params = parse_params(rest)?;
    // A parameter named twice: the last one counts, as in containerd's parser (a map by name).
    let get = |k: &str| params.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
    let realm = get("realm").unwrap_or_default();
    if scheme == Scheme::Bearer && realm.is_empty() {
        return None;
    }
    Some(Challenge { scheme, realm, service: get("service"), scope: get("scope"), error: get("error") })
}

/// The challenge to answer among a response's `WWW-Authenticate` headers, chosen as containerd
/// chooses (each header one challenge, Bearer before Basic, otherwise in the order sent); None
/// when no header holds a usable one.
pub fn choose_challenge<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<Challenge> {
    let parsed: Vec<Challenge> = headers.into_iter().take(16).filter_map(parse_challenge).collect();
    let pick = parsed.iter().position(|c| c.scheme == Scheme::Bearer).unwrap_or(0);
    parsed.into_iter().nth(pick)
}

fn parse_params(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t') {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return Some(out);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b"-_.".contains(&b[i])) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let name = s[start..i].to_string();
        skip_ws(&mut i);
        if i >= b.len() || b[i] != b'=' {
            return None;
        }
        i += 1;
        skip_ws(&mut i);
        let value = if i < b.len() && b[i] == b'"' {
            i += 1;
            let mut v = Vec::new();
            loop {
                match b.get(i)? {
                    b'"' => {
                        i += 1;
                        break;
                    }
                    b'\\' => {
                        v.push(*b.get(i + 1)?);
                        i += 2;
                    }
                    c if *c < 0x20 => return None,
                    c => {
                        v.push(*c);
                        i += 1;
                    }
                }
            }
            String::from_utf8(v).ok()?
        } else {
            let start = i;
            while i < b.len() && b[i] != b',' && b[i] != b' ' && b[i] != b'\t' {
                i += 1;
            }
            if i == start {
                return None;
            }
            s[start..i].to_string()
        };
        out.push((name, value));
        skip_ws(&mut i);
        match b.get(i) {
            None => return Some(out),
            Some(b',') => i += 1,
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_named_twice_counts_last_and_bearer_goes_first() {
        let c = parse_challenge(r#"Bearer realm="http://a/token",service="one",REALM="http://b/token""#).unwrap();
        assert_eq!((c.realm.as_str(), c.service.as_deref()), ("http://b/token", Some("one")));
        let c = choose_challenge([r#"Basic realm="r""#, "Negotiate", r#"Bearer realm="http://t/token""#]).unwrap();
        assert_eq!((c.scheme, c.realm.as_str()), (Scheme::Bearer, "http://t/token"));
        let c = choose_challenge(["Negotiate", r#"Basic realm="r""#, r#"Basic realm="s""#]).unwrap();
        assert_eq!((c.scheme, c.realm.as_str()), (Scheme::Basic, "r"));
        assert!(choose_challenge(["Negotiate", "Bearer"]).is_none());
    }

    #[test]
    fn bearer_with_scope_and_error() {
        let c = parse_challenge(
            r#"Bearer realm="http://127.0.0.1:5001/token",service="registry",scope="repository:private/app:pull",error="insufficient_scope""#,
        )
        .unwrap();
        assert_eq!(c.scheme, Scheme::Bearer);
        assert_eq!(c.realm, "http://127.0.0.1:5001/token");
        assert_eq!(c.service.as_deref(), Some("registry"));
        assert_eq!(c.scope.as_deref(), Some("repository:private/app:pull"));
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
    }

    #[test]
    fn basic_and_token_values() {
        let c = parse_challenge(r#"Basic realm="pullgate-test""#).unwrap();
        assert_eq!((c.scheme, c.realm.as_str()), (Scheme::Basic, "pullgate-test"));
        let c = parse_challenge(r#"bearer  realm = "r\"x" , service=svc"#).unwrap();
        assert_eq!((c.realm.as_str(), c.service.as_deref()), ("r\"x", Some("svc")));
    }

    #[test]
    fn malformed_challenges_are_refused() {
        for bad in [
            "", "Negotiate abc", "Bearer", r#"Bearer service="x""#, r#"Bearer realm="unterminated"#, "Bearer realm",
            r#"Bearer realm="a" junk"#, "Bearer =x", "Bearer realm=\"a\x01\"", r#"Bearer realm="a",,"#,
        ] {
            assert!(parse_challenge(bad).is_none(), "{bad:?} should be refused");
        }
        assert!(parse_challenge(&format!("Bearer realm=\"{}\"", "a".repeat(9000))).is_none());
    }
}
