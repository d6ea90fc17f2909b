#![no_main]
// WWW-Authenticate challenges: never panic; a Bearer challenge always has a realm.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Some(c) = pullgate::registry::auth::parse_challenge(s) {
        if c.scheme == pullgate::registry::auth::Scheme::Bearer {
            assert!(!c.realm.is_empty());
        }
    }
});
