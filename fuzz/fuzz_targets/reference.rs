#![no_main]
// Image references and allowlist entries: never panic; what parses prints back and parses again.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(r) = pullgate::reference::Reference::parse(s) {
        let again = pullgate::reference::Reference::parse(&r.to_string()).expect("a parsed reference must re-parse");
        assert_eq!(again, r);
        assert!(!r.origin().contains(char::is_control));
    }
    let _ = pullgate::reference::AllowPattern::parse(s);
});
