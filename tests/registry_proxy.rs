//! The environment's HTTP proxy (its own process: the variables are the process's): a loopback
//! registry is reached directly, as Go's `http.ProxyFromEnvironment` (containerd's transport)
//! reaches it, and any other registry through the proxy.
use pullgate::reference::Reference;
use pullgate::registry::{Options, Session};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A server answering every request as `answer` says for its request line (the status and the
/// `WWW-Authenticate` header, if any) with a manifest body; the request lines it saw.
fn answering(answer: impl Fn(&str) -> (u16, String) + Send + 'static) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let mut lines = BufReader::new(conn.try_clone().unwrap()).lines();
            let first = lines.next().and_then(Result::ok).unwrap_or_default();
            while lines.next().and_then(Result::ok).is_some_and(|l| !l.is_empty()) {}
            let (status, challenge) = answer(&first);
            let is_token = first.contains("/token");
            log.lock().unwrap().push(first);
            let body = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":2},"layers":[]}"#;
            let body = if is_token { r#"{"token":"t"}"# } else { body };
            let _ = write!(conn, "HTTP/1.1 {status} X\r\n{challenge}Content-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    (port, seen)
}

#[test]
fn a_loopback_registry_is_never_reached_through_the_environments_proxy() {
    let (token, tokens) = answering(|_| (200, String::new()));
    // The proxy answers for the other registry, whose challenge names a token service on the
    // loopback: asked directly too (where the proxy would read the password in plain http).
    let (proxy, proxied) = answering(move |line| match line.contains("/token") {
        true => (200, String::new()),
        false => (401, format!("WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{token}/token\",service=\"reg\"\r\n")),
    });
    let (registry, direct) = answering(|_| (200, String::new()));
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        std::env::set_var(var, format!("http://127.0.0.1:{proxy}"));
    }
    std::env::remove_var("NO_PROXY");
    std::env::remove_var("no_proxy");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = Options { plain_http: true, timeout: Some(Duration::from_secs(2)), ..Default::default() };
    for name in [format!("127.0.0.1:{registry}"), format!("localhost:{registry}")] {
        let r = Reference::parse(&format!("{name}/team/app:v1")).unwrap();
        rt.block_on(Session::new(&r, None, &opts).unwrap().get_manifest("v1")).unwrap();
    }
    assert_eq!(direct.lock().unwrap().len(), 2, "the registry was asked directly");
    assert!(proxied.lock().unwrap().is_empty(), "the proxy was asked for a loopback registry: {:?}", proxied.lock().unwrap());
    // Any other registry goes through the proxy (which answers for it here).
    let r = Reference::parse("registry.example:5000/team/app:v1").unwrap();
    let cred = pullgate::credential::Credential::parse("alice:S3cret").ok();
    let e = rt.block_on(Session::new(&r, cred, &opts).unwrap().get_manifest("v1")).unwrap_err();
    assert!(proxied.lock().unwrap().iter().all(|l| l.starts_with("GET http://registry.example:5000/v2/team/app/manifests/v1 ")), "{:?} ({e})", proxied.lock().unwrap());
    assert!(!proxied.lock().unwrap().is_empty(), "the proxy was not asked for registry.example ({e})");
    assert_eq!(tokens.lock().unwrap().len(), 1, "the loopback token service was not asked directly ({e})");
}
