//! The registry client against hostile or broken registries (fake HTTP servers on loopback):
//! each case must end with the right, clear error within a bounded time, and credentials must
//! never follow a redirect to another host.
use pullgate::credential::{Credential, TokenForm};
use pullgate::reference::Reference;
use pullgate::registry::{Options, RegistryError, Session};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request as the fake server saw it.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    authorization: Option<String>,
    body: String,
}

type Handler = Arc<dyn Fn(&Seen, u16) -> Reply + Send + Sync>;

enum Reply {
    Full { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// Sends the headers, then one byte per `every` forever.
    Trickle { every: Duration },
    /// 200 with a body and no Content-Length: its end is the connection's.
    Unframed { body: Vec<u8> },
}

fn reply(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    Reply::Full { status, headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), body: body.to_vec() }
}

/// Starts a fake registry on `ip`; returns its port and the log of requests.
fn serve(ip: &str, h: Handler) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let (h, log) = (h.clone(), log2.clone());
            std::thread::spawn(move || handle(conn, h, log, port));
        }
    });
    (port, log)
}

fn handle(mut conn: TcpStream, h: Handler, log: Arc<Mutex<Vec<Seen>>>, port: u16) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut auth = None;
        let mut len = 0usize;
        loop {
            let mut hl = String::new();
            if r.read_line(&mut hl).unwrap_or(0) == 0 || hl == "\r\n" {
                break;
            }
            let lower = hl.to_ascii_lowercase();
            if lower.starts_with("authorization:") {
                auth = Some(hl[14..].trim().to_string());
            }
            if lower.starts_with("content-length:") {
                len = lower[15..].trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        let _ = r.read_exact(&mut body);
        let seen = Seen { line: line.trim().to_string(), authorization: auth, body: String::from_utf8_lossy(&body).into_owned() };
        log.lock().unwrap().push(seen.clone());
        match h(&seen, port) {
            Reply::Full { status, headers, body } => {
                let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                if conn.write_all(out.as_bytes()).is_err() || (!seen.line.starts_with("HEAD") && conn.write_all(&body).is_err()) {
                    return;
                }
            }
            Reply::Unframed { body } => {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let _ = conn.write_all(&body);
                let _ = conn.shutdown(std::net::Shutdown::Both);
                return;
            }
            Reply::Trickle { every } => {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\r\n");
                loop {
                    std::thread::sleep(every);
                    if conn.write_all(b" ").is_err() {
                        return;
                    }
                }
            }
        }
    }
}

fn session(port: u16, repo_ref: &str, cred: Option<&str>) -> Session {
    session_with(port, repo_ref, cred.map(|c| Credential::parse(c).unwrap()))
}

fn session_with(port: u16, repo_ref: &str, cred: Option<Credential>) -> Session {
    let r = Reference::parse(&format!("127.0.0.1:{port}/{repo_ref}")).unwrap();
    let opts = Options { plain_http: true, hosts_dir: None, server: None, timeout: Some(Duration::from_secs(1)), http_with_tls: Default::default() };
    Session::new(&r, cred, &opts).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

const MANIFEST: &str = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":2},"layers":[]}"#;

#[test]
fn manifest_whose_bytes_do_not_match_its_digest() {
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| {
        reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json"), ("Docker-Content-Digest", "sha256:0000000000000000000000000000000000000000000000000000000000000000")], MANIFEST.as_bytes())
    }));
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::DigestMismatch { .. }), "{e}");
    // Asked by digest, the bytes must hash to it whatever the headers say.
    let want = format!("sha256:{}", "1".repeat(64));
    let e = rt().block_on(session(port, "a/b", None).get_manifest(&want)).unwrap_err();
    assert!(matches!(e, RegistryError::DigestMismatch { .. }), "{e}");
}

#[test]
fn manifest_over_the_size_cap() {
    let big = vec![b' '; pullgate::registry::MAX_MANIFEST + 1];
    let (port, _) = serve("127.0.0.1", Arc::new(move |_: &Seen, _| reply(200, &[], &big)));
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

#[test]
fn malformed_challenges() {
    for header in ["", "Negotiate xyz", "Bearer service=\"x\"", "Bearer realm=\"unterminated"] {
        let h = header.to_string();
        let (port, _) = serve("127.0.0.1", Arc::new(move |_: &Seen, _| {
            if h.is_empty() { reply(401, &[], b"") } else { reply(401, &[("WWW-Authenticate", h.as_str())], b"") }
        }));
        let e = rt().block_on(session(port, "a/b", Some("u:p")).get_manifest("v1")).unwrap_err();
        assert!(matches!(e, RegistryError::Protocol { .. }), "{header:?}: {e}");
    }
}

#[test]
fn looping_challenges_end() {
    // The registry keeps asking for a token it then refuses: the client stops after one round.
    let (port, log) = serve("127.0.0.1", Arc::new(|s: &Seen, port| {
        if s.line.contains("/token") {
            reply(200, &[], br#"{"token":"t"}"#)
        } else {
            let ch = format!("Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"s\"");
            Reply::Full { status: 401, headers: vec![("WWW-Authenticate".into(), ch)], body: vec![] }
        }
    }));
    let t = Instant::now();
    let e = rt().block_on(session(port, "a/b", Some("u:p")).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::NoAccess { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(log.lock().unwrap().len() <= 4, "{:?}", log.lock().unwrap());
}

#[test]
fn token_endpoint_that_errors_or_stalls() {
    let (port, _) = serve("127.0.0.1", Arc::new(|s: &Seen, port| {
        if s.line.contains("/token") {
            reply(500, &[], b"boom")
        } else {
            let ch = format!("Bearer realm=\"http://127.0.0.1:{port}/token\"");
            Reply::Full { status: 401, headers: vec![("WWW-Authenticate".into(), ch)], body: vec![] }
        }
    }));
    let e = rt().block_on(session(port, "a/b", Some("u:p")).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");

    let (port, _) = serve("127.0.0.1", Arc::new(|s: &Seen, port| {
        if s.line.contains("/token") {
            Reply::Trickle { every: Duration::from_secs(3) }
        } else {
            let ch = format!("Bearer realm=\"http://127.0.0.1:{port}/token\"");
            Reply::Full { status: 401, headers: vec![("WWW-Authenticate".into(), ch)], body: vec![] }
        }
    }));
    let t = Instant::now();
    let e = rt().block_on(session(port, "a/b", Some("u:p")).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
}

#[test]
fn redirect_to_another_host_carries_no_credentials() {
    let (other, other_log) = serve("127.0.0.2", Arc::new(|_: &Seen, _| reply(200, &[], b"xx")));
    let (port, log) = serve("127.0.0.1", Arc::new(move |s: &Seen, _| {
        if s.authorization.is_none() {
            reply(401, &[("WWW-Authenticate", "Basic realm=\"r\"")], b"")
        } else {
            let loc = format!("http://127.0.0.2:{other}/storage/blob");
            Reply::Full { status: 307, headers: vec![("Location".into(), loc)], body: vec![] }
        }
    }));
    let digest = format!("sha256:{}", hex_sha256(b"xx"));
    let out = rt().block_on(async {
        let mut s = session(port, "a/b", Some("u:secret"));
        let mut r = s.open_blob(&digest, 2).await?;
        let mut n = 0;
        while let Some(c) = r.next_chunk().await? {
            n += c.len();
        }
        Ok::<_, RegistryError>(n)
    });
    assert_eq!(out.unwrap(), 2);
    assert!(log.lock().unwrap().iter().any(|s| s.authorization.is_some()), "the registry itself got the credentials");
    let seen = other_log.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].authorization.is_none(), "credentials followed the redirect: {:?}", seen[0]);
}

#[test]
fn endless_redirects_end() {
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, port| {
        Reply::Full { status: 302, headers: vec![("Location".into(), format!("http://127.0.0.1:{port}/v2/a/b/manifests/again"))], body: vec![] }
    }));
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(e.to_string().contains("redirects"), "{e}");
}

#[test]
fn a_trickling_connection_times_out() {
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| Reply::Trickle { every: Duration::from_secs(2) }));
    let t = Instant::now();
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(6), "took {:?}", t.elapsed());
}

#[test]
fn a_connection_that_trickles_faster_than_the_idle_timeout_still_ends() {
    // One byte every 0.3 s never trips the 1 s idle timeout: the whole-answer deadline must.
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| Reply::Trickle { every: Duration::from_millis(300) }));
    let t = Instant::now();
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(6), "took {:?}", t.elapsed());
    let digest = format!("sha256:{}", "2".repeat(64));
    let t = Instant::now();
    // (The size its Content-Length gives: a blob of another length is refused before its body.)
    let e = read_blob(port, &digest, 1_000_000).unwrap_err();
    assert!(e.to_string().contains("slower than"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(6), "took {:?}", t.elapsed());
}

#[test]
fn blob_with_wrong_bytes_or_length() {
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| reply(200, &[], b"not the blob")));
    let digest = format!("sha256:{}", hex_sha256(b"the blob"));
    for size in [8u64, 3] {
        let e = read_blob(port, &digest, size).unwrap_err();
        assert!(matches!(e, RegistryError::DigestMismatch { .. }), "{e}");
    }
    // The blob's own bytes under a manifest that names a larger size: the error says which
    // sizes differ (not the same digest twice).
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| reply(200, &[], b"the blob")));
    let e = read_blob(port, &digest, 9).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("expected 9 bytes") && msg.contains("got 8 bytes"), "{msg}");
    // Said by its Content-Length, before the body was read; and without one, once it ended.
    assert!(msg.contains("Content-Length"), "{msg}");
    let (port, _) = serve("127.0.0.1", Arc::new(|_: &Seen, _| Reply::Unframed { body: b"the blob".to_vec() }));
    let msg = read_blob(port, &digest, 9).unwrap_err().to_string();
    assert!(msg.contains("expected 9 bytes") && msg.contains("got 8 bytes") && !msg.contains("Content-Length"), "{msg}");
}

#[test]
fn a_registry_that_is_down() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = rt().block_on(session(port, "a/b", None).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");
}

#[test]
fn a_plain_http_server_asked_over_https_says_what_to_do() {
    // As Go's http server answers a TLS handshake: in plain http.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n");
        }
    });
    // (Named as an https server: a loopback registry's own server would be asked as containerd
    // asks it, https first, then plain http.)
    let r = Reference::parse(&format!("127.0.0.1:{port}/a/b")).unwrap();
    let server = format!("https://127.0.0.1:{port}");
    let opts = Options { plain_http: false, hosts_dir: None, server: Some(&server), timeout: Some(Duration::from_secs(1)), http_with_tls: Default::default() };
    let e = rt().block_on(Session::new(&r, None, &opts).unwrap().resolve(&r, "linux/amd64")).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }) && e.to_string().contains("answers plain http there: ask it with --plain-http"), "{e}");
    // A server that is down gets no such hint.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = format!("https://127.0.0.1:{port}");
    let opts = Options { server: Some(&server), ..opts };
    let e = rt().block_on(Session::new(&Reference::parse(&format!("127.0.0.1:{port}/a/b")).unwrap(), None, &opts).unwrap().get_manifest("v1")).unwrap_err();
    assert!(!e.to_string().contains("plain http"), "{e}");
}

/// Reads a whole blob from the server on `port` (repository a/b).
fn read_blob(port: u16, digest: &str, size: u64) -> Result<(), RegistryError> {
    rt().block_on(async {
        let mut s = session(port, "a/b", None);
        let mut r = s.open_blob(digest, size).await?;
        while r.next_chunk().await?.is_some() {}
        Ok(())
    })
}

fn hex_sha256(b: &[u8]) -> String {
    pullgate::registry::sha256_digest(b).trim_start_matches("sha256:").to_string()
}

const TOKEN: &str = "Tok-3c8e1a-refresh";

/// A token registry whose token service answers the POST with `token_reply`; the registry takes
/// `Bearer good-access` only.
fn token_registry(token_reply: fn() -> Reply) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    serve("127.0.0.1", Arc::new(move |s: &Seen, port| {
        if s.line.contains("/token") {
            return if s.line.starts_with("POST") { token_reply() } else { reply(200, &[], br#"{"token":"anonymous-access"}"#) };
        }
        if s.authorization.as_deref() == Some("Bearer good-access") {
            return reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")], MANIFEST.as_bytes());
        }
        let ch = format!(r#"Bearer realm="http://127.0.0.1:{port}/token",service="reg",error="invalid_token""#);
        reply(401, &[("WWW-Authenticate", ch.as_str())], b"")
    }))
}

fn identity_token() -> Option<Credential> {
    Some(Credential::token(TokenForm::Identity, TOKEN.into()).unwrap())
}

#[test]
fn an_identity_token_is_exchanged_with_the_refresh_token_grant() {
    let (port, log) = token_registry(|| reply(200, &[], br#"{"access_token":"good-access","refresh_token":"Tok-3c8e1a-refresh"}"#));
    rt().block_on(session_with(port, "a/b", identity_token()).get_manifest("v1")).unwrap();
    let log = log.lock().unwrap();
    let post = log.iter().find(|s| s.line.starts_with("POST /token")).expect("a token POST");
    for field in ["grant_type=refresh_token", &format!("refresh_token={TOKEN}"), "service=reg", "scope=repository%3Aa%2Fb%3Apull", "client_id=pullgate"] {
        assert!(post.body.contains(field), "{field} not in {}", post.body);
    }
    assert!(!post.body.contains("username") && !post.body.contains("password"), "{}", post.body);
    // The token goes to the token service only, never to the registry.
    assert!(log.iter().filter(|s| !s.line.contains("/token")).all(|s| !s.authorization.as_deref().unwrap_or("").contains(TOKEN)));
}

#[test]
fn a_refused_identity_token_names_the_cause_and_never_the_token() {
    // A token service that echoes the token in its description: the description is dropped.
    let (port, log) = token_registry(|| reply(400, &[], br#"{"error":"invalid_grant","error_description":"refresh token Tok-3c8e1a-refresh revoked"}"#));
    let e = rt().block_on(session_with(port, "a/b", identity_token()).get_manifest("v1")).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RegistryError::TokenRefused { .. }) && msg.contains("invalid_grant") && !msg.contains(TOKEN) && !format!("{e:?}").contains(TOKEN), "{msg}");
    // No fallback: the token service was not asked by GET, anonymously or otherwise.
    assert!(!log.lock().unwrap().iter().any(|s| s.line.starts_with("GET /token")));
    let (port, _) = token_registry(|| reply(400, &[], br#"{"error":"invalid_grant","error_description":"the refresh token has expired"}"#));
    let msg = rt().block_on(session_with(port, "a/b", identity_token()).get_manifest("v1")).unwrap_err().to_string();
    // Its own words are not quoted either (they could carry the token in any form): the code,
    // and what it can mean.
    assert!(msg.contains("refused the identity token: invalid_grant (expired, revoked") && !msg.contains("the refresh token has expired"), "{msg}");
}

#[test]
fn a_token_service_without_the_refresh_token_grant() {
    for answer in [(|| reply(404, &[], b"")) as fn() -> Reply, || reply(405, &[], b""), || reply(400, &[], br#"{"error":"unsupported_grant_type"}"#)] {
        let (port, log) = token_registry(answer);
        let e = rt().block_on(session_with(port, "a/b", identity_token()).get_manifest("v1")).unwrap_err();
        assert!(matches!(e, RegistryError::UnusableCredential { .. }) && e.to_string().contains("refresh-token grant"), "{e}");
        assert!(!log.lock().unwrap().iter().any(|s| s.line.starts_with("GET /token")));
    }
}

#[test]
fn a_registry_token_is_the_bearer_token_as_it_is() {
    let (port, log) = token_registry(|| reply(500, &[], b""));
    let rt_cred = Some(Credential::token(TokenForm::Registry, "good-access".into()).unwrap());
    rt().block_on(session_with(port, "a/b", rt_cred).get_manifest("v1")).unwrap();
    assert!(!log.lock().unwrap().iter().any(|s| s.line.contains("/token")), "the token service was asked");
    // Refused by the registry (invalid_token): the registry token is named, not quoted.
    let bad = Some(Credential::token(TokenForm::Registry, "Tok-expired-77".into()).unwrap());
    let e = rt().block_on(session_with(port, "a/b", bad).get_manifest("v1")).unwrap_err();
    assert!(matches!(e, RegistryError::BadCredential { .. }) && e.to_string().contains("registry token") && !e.to_string().contains("Tok-expired-77"), "{e}");
    // A registry that asks for Basic: no token can answer, and none is sent.
    let (port, log) = serve("127.0.0.1", Arc::new(|_: &Seen, _| reply(401, &[("WWW-Authenticate", r#"Basic realm="r""#)], b"")));
    for cred in [identity_token(), Some(Credential::token(TokenForm::Registry, TOKEN.into()).unwrap())] {
        let e = rt().block_on(session_with(port, "a/b", cred).get_manifest("v1")).unwrap_err();
        assert!(matches!(e, RegistryError::UnusableCredential { .. }) && e.to_string().contains("Basic"), "{e}");
    }
    assert!(log.lock().unwrap().iter().all(|s| s.authorization.is_none()));
}

#[test]
fn a_token_service_echoing_the_token_encoded_cut_or_in_another_case_is_not_repeated() {
    // Dropping the description only when it holds the token exactly would let each of these through.
    let echoes: [fn() -> Reply; 4] = [
        || reply(400, &[], br#"{"error":"invalid_grant","error_description":"bad token Tok-3c8e1a%2Drefresh"}"#),
        || reply(400, &[], br#"{"error":"invalid_grant","error_description":"bad TOK-3C8E1A-REFRESH"}"#),
        || reply(400, &[], br#"{"error":"invalid_grant","error_description":"bad 3c8e1a-ref..."}"#),
        || reply(400, &[], br#"{"error":"Tok-3c8e1a-refres","error_description":"x"}"#),
    ];
    for (i, answer) in echoes.into_iter().enumerate() {
        let (port, _) = token_registry(answer);
        let e = rt().block_on(session_with(port, "a/b", identity_token()).get_manifest("v1")).unwrap_err();
        let msg = e.to_string().to_ascii_lowercase();
        assert!(matches!(e, RegistryError::TokenRefused { .. }), "{i}: {e}");
        for run in ["3c8e1a", "c8e1a-re", "c8e1a%2dr", "tok-3c8e"] {
            assert!(!msg.contains(run), "{i}: {run} in {msg}");
        }
    }
}

#[test]
fn a_host_the_registry_redirects_to_gets_no_credentials_when_it_asks() {
    // A blob store that answers the redirected GET with its own challenge, naming a realm of its
    // own: neither the password nor the identity token may go there.
    let (realm, realm_log) = serve("127.0.0.3", Arc::new(|_: &Seen, _| reply(200, &[], br#"{"token":"stolen"}"#)));
    let (store, _) = serve("127.0.0.2", Arc::new(move |_: &Seen, _| {
        let ch = format!(r#"Bearer realm="http://127.0.0.3:{realm}/token",service="cdn""#);
        reply(401, &[("WWW-Authenticate", ch.as_str())], b"")
    }));
    let (port, _) = serve("127.0.0.1", Arc::new(move |_: &Seen, _| {
        Reply::Full { status: 307, headers: vec![("Location".into(), format!("http://127.0.0.2:{store}/blob"))], body: vec![] }
    }));
    let digest = format!("sha256:{}", hex_sha256(b"xx"));
    for cred in [Credential::parse("u:Victim-Password-456").ok(), identity_token()] {
        let e = rt().block_on(async { session_with(port, "a/b", cred).open_blob(&digest, 2).await.map(|_| ()) }).unwrap_err();
        assert!(e.to_string().contains("offers them only to the registry itself"), "{e}");
    }
    let seen = realm_log.lock().unwrap();
    assert!(seen.is_empty(), "the redirect target's realm was asked: {seen:?}");
}

/// A server that is not the registry named (a mirror or proxy, from a hosts.toml) gets
/// `?ns=REGISTRY` on every manifest and blob request, encoded as containerd's resolver encodes it;
/// the registry's own server gets none.
#[test]
fn a_mirror_is_told_which_registry_it_serves_as_containerd_tells_it() {
    let blob = b"xx";
    let digest = format!("sha256:{}", hex_sha256(blob));
    let (port, log) = serve("127.0.0.1", Arc::new(|s: &Seen, _| {
        if s.line.contains("/manifests/") {
            reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")], MANIFEST.as_bytes())
        } else {
            reply(200, &[], b"xx")
        }
    }));
    let fetch = |reference: &str| {
        let r = Reference::parse(reference).unwrap();
        let server = format!("http://127.0.0.1:{port}");
        let opts = Options { plain_http: false, hosts_dir: None, server: Some(&server), timeout: Some(Duration::from_secs(5)), http_with_tls: Default::default() };
        let mut s = Session::new(&r, None, &opts).unwrap();
        rt().block_on(async {
            s.get_manifest("v1").await?;
            let mut b = s.open_blob(&digest, 2).await?;
            while b.next_chunk().await?.is_some() {}
            Ok::<_, RegistryError>(s.origin())
        })
        .unwrap()
    };
    let origin = fetch("registry.example:5000/team/app");
    let lines: Vec<String> = log.lock().unwrap().drain(..).map(|s| s.line).collect();
    assert_eq!(
        lines,
        [format!("GET /v2/team/app/manifests/v1?ns=registry.example%3A5000 HTTP/1.1"), format!("GET /v2/team/app/blobs/{digest}?ns=registry.example%3A5000 HTTP/1.1")]
    );
    assert_eq!(origin, format!("http://127.0.0.1:{port}/team/app?ns=registry.example%3A5000"), "the origin is the server contacted, for that registry");
    fetch(&format!("127.0.0.1:{port}/team/app"));
    let lines: Vec<String> = log.lock().unwrap().drain(..).map(|s| s.line).collect();
    assert!(lines.iter().all(|l| !l.contains('?')), "the registry's own server got a query: {lines:?}");
    assert_eq!(lines.len(), 2);
}

/// A proxy answering each registry with its own content: two registries through it are two
/// origins and two endpoints (one tenant's registry never vouches for the other's blobs).
#[test]
fn two_registries_behind_one_proxy_are_two_origins() {
    let (port, _) = serve("127.0.0.1", Arc::new(|s: &Seen, _| {
        let body = if s.line.contains("ns=evil.example") { MANIFEST.replace("\"layers\":[]", "\"layers\":[],\"annotations\":{\"x\":\"evil\"}") } else { MANIFEST.to_string() };
        reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")], body.as_bytes())
    }));
    let server = format!("http://127.0.0.1:{port}");
    let get = |reference: &str| {
        let r = Reference::parse(reference).unwrap();
        let opts = Options { plain_http: false, hosts_dir: None, server: Some(&server), timeout: Some(Duration::from_secs(5)), http_with_tls: Default::default() };
        let mut s = Session::new(&r, None, &opts).unwrap();
        let m = rt().block_on(s.get_manifest("v1")).unwrap();
        (s.origin(), s.endpoint().to_string(), m.digest)
    };
    let (oa, ea, ma) = get("reg-a.example/team/app:v1");
    let (ob, eb, mb) = get("evil.example/team/app:v1");
    assert_ne!(ma, mb, "the proxy answered for two registries");
    assert_ne!(oa, ob);
    assert_ne!(ea, eb);
    assert_eq!(pullgate::registry::origin_endpoint(&oa), ea);
}

/// A challenge remembered for one registry behind a proxy is not answered for another: a
/// tenant's password never goes to the token service another registry behind it named.
#[test]
fn a_challenge_remembered_through_a_proxy_stays_with_its_registry() {
    let (tport, tlog) = serve("127.0.0.1", Arc::new(|_: &Seen, _| reply(200, &[], br#"{"token":"evil-tok"}"#)));
    let (port, _) = serve("127.0.0.1", Arc::new(move |s: &Seen, port| {
        let ok = |b: &[u8]| reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")], b);
        if s.line.contains("/token") {
            return reply(200, &[], br#"{"token":"good"}"#);
        }
        if s.line.contains("ns=evil.example") {
            if s.authorization.as_deref() == Some("Bearer evil-tok") {
                return ok(MANIFEST.as_bytes());
            }
            let ch = format!(r#"Bearer realm="http://127.0.0.1:{tport}/token",service="evil""#);
            return reply(401, &[("WWW-Authenticate", ch.as_str())], b"");
        }
        if s.authorization.as_deref() == Some("Bearer good") {
            return ok(MANIFEST.as_bytes());
        }
        let ch = format!(r#"Bearer realm="http://127.0.0.1:{port}/token",service="proxy""#);
        reply(401, &[("WWW-Authenticate", ch.as_str())], b"")
    }));
    let server = format!("http://127.0.0.1:{port}");
    let get = |reference: &str, cred: &str| {
        let r = Reference::parse(reference).unwrap();
        let opts = Options { plain_http: false, hosts_dir: None, server: Some(&server), timeout: Some(Duration::from_secs(5)), http_with_tls: Default::default() };
        let mut s = Session::new(&r, Some(Credential::parse(cred).unwrap()), &opts).unwrap();
        rt().block_on(s.get_manifest("v1")).map(|_| ())
    };
    get("evil.example/team/app:v1", "mallory:pw").unwrap();
    tlog.lock().unwrap().clear();
    get("reg-a.example/team/app:v1", "alice:S3cret-victim").unwrap();
    let seen: Vec<String> = tlog.lock().unwrap().iter().map(|s| format!("{} {}", s.line, s.body)).collect();
    assert!(seen.is_empty(), "the other registry's token service was asked: {seen:?}");
}

/// Whether a server is a proxy is decided as containerd decides it: only for a named server,
/// by its host as written against the registry's name as written.
#[test]
fn a_proxy_is_told_apart_as_containerd_tells_it() {
    use pullgate::registry::hosts;
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("_default")).unwrap();
    // No server named: the registry's own server, no ns.
    std::fs::write(d.path().join("_default/hosts.toml"), "skip_verify = true\n").unwrap();
    for host in ["reg.example:443", "Reg.Example", "reg.example"] {
        assert_eq!(hosts::endpoint(host, Some(d.path()), false, None).unwrap().ns, None, "{host}");
    }
    let ns = |host: &str, server: &str| hosts::endpoint(host, None, false, Some(server)).unwrap().ns;
    assert_eq!(ns("reg.example:443", "https://reg.example:443"), None);
    assert_eq!(ns("reg.example", "https://reg.example:443"), Some("reg.example".into()));
    assert_eq!(ns("reg.example", "https://Reg.Example"), Some("reg.example".into()));
    assert_eq!(ns("docker.io", "https://registry-1.docker.io"), None);
    assert_eq!(ns("docker.io", "https://registry-1.docker.io:443"), Some("docker.io".into()));
    assert_eq!(ns("reg.example", "reg.example/v2"), None);
    // docker.io itself serves no registry API: refused as a server.
    assert!(hosts::endpoint("evil.example", None, false, Some("https://docker.io")).is_err());
}

/// A challenge a plain http endpoint gave is kept for moments only, counted from when it was
/// given: whatever answered on that port once (a process that held it while the registry was
/// down) cannot name, later, the token service a tenant's password goes to, not even by
/// stalling its own token answer.
#[test]
fn a_plain_http_endpoints_challenge_is_kept_for_moments_only() {
    let (tport, tlog) = serve("127.0.0.1", Arc::new(|_: &Seen, _| {
        std::thread::sleep(Duration::from_millis(2500));
        reply(200, &[], br#"{"token":"evil-tok"}"#)
    }));
    let impostor = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let now_impostor = impostor.clone();
    let (port, _) = serve("127.0.0.1", Arc::new(move |s: &Seen, port| {
        let ok = |b: &[u8]| reply(200, &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")], b);
        let (realm, token) = match now_impostor.load(std::sync::atomic::Ordering::SeqCst) {
            true => (format!("http://127.0.0.1:{tport}/token"), "Bearer evil-tok"),
            false if s.line.contains("/token") => return reply(200, &[], br#"{"token":"good"}"#),
            false => (format!("http://127.0.0.1:{port}/token"), "Bearer good"),
        };
        if s.authorization.as_deref() == Some(token) {
            return ok(MANIFEST.as_bytes());
        }
        let ch = format!(r#"Bearer realm="{realm}",service="reg""#);
        reply(401, &[("WWW-Authenticate", ch.as_str())], b"")
    }));
    let given = Instant::now();
    let opts = Options { plain_http: true, timeout: Some(Duration::from_secs(5)), ..Default::default() };
    let r = Reference::parse(&format!("127.0.0.1:{port}/team/app")).unwrap();
    rt().block_on(Session::new(&r, Some(Credential::parse("mallory:pw").unwrap()), &opts).unwrap().get_manifest("v1")).unwrap();
    impostor.store(false, std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(5300).saturating_sub(given.elapsed()));
    tlog.lock().unwrap().clear();
    rt().block_on(session(port, "team/app", Some("alice:S3cret-victim")).get_manifest("v1")).unwrap();
    let seen: Vec<String> = tlog.lock().unwrap().iter().map(|s| format!("{} {}", s.line, s.body)).collect();
    assert!(seen.is_empty(), "the token service the earlier answer named was asked: {seen:?}");
}

/// A registry writing the password it was sent where a digest belongs (the manifest's
/// Docker-Content-Digest, an index entry's digest) gets a refusal that never repeats it.
#[test]
fn a_password_written_where_a_digest_belongs_is_never_repeated() {
    const PW: &str = "Pw9secretDigest";
    let hexpw: String = PW.bytes().map(|b| format!("{b:02x}")).collect();
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"x:{hexpw}","size":2,"platform":{{"os":"linux","architecture":"amd64"}}}}]}}"#
    );
    let index = Arc::new(index);
    let (port, _) = serve("127.0.0.1", Arc::new(move |s: &Seen, _| {
        let ct = |t: &'static str| ("Content-Type", t);
        if s.line.contains("/header/manifests/") {
            reply(200, &[ct("application/vnd.oci.image.manifest.v1+json"), ("Docker-Content-Digest", PW)], MANIFEST.as_bytes())
        } else if s.line.contains("/index/manifests/") {
            reply(200, &[ct("application/vnd.oci.image.index.v1+json")], index.as_bytes())
        } else {
            reply(404, &[], b"")
        }
    }));
    let resolve = |repo: &str| {
        let r = Reference::parse(&format!("127.0.0.1:{port}/{repo}:v1")).unwrap();
        rt().block_on(session(port, repo, Some(&format!("u:{PW}"))).resolve(&r, "linux/amd64"))
    };
    let e = resolve("a/header").unwrap_err();
    assert!(matches!(e, RegistryError::Protocol { .. }) && e.to_string().contains("Docker-Content-Digest is not a sha256 digest"), "{e}");
    let e = resolve("a/index").unwrap_err();
    assert!(e.to_string().contains("names no sha256 digest"), "{e}");
    for e in [resolve("a/header").unwrap_err().to_string(), resolve("a/index").unwrap_err().to_string()] {
        assert!(!e.contains(PW) && !e.contains(&hexpw), "{e}");
    }
}
