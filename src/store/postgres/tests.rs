//! What needs no server: reading the store URL.

#[test]
fn urls_are_checked_and_shown_without_their_password() {
    let parse = super::Target::parse;
    let target = parse("postgres://sy:s3cret@db.internal:6543/gateway").unwrap();
    assert_eq!(target.shown(), "db.internal:6543/gateway");
    assert!(!format!("{:?}", target.config).contains("s3cret"));
    for mode in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
        let url = format!("postgres://sy@db/gateway?sslmode={mode}&connect_timeout=2");
        assert!(parse(&url).is_ok(), "{mode}");
    }
    let refused = parse("postgres://sy@db/gateway?sslmode=allow-anything")
        .err()
        .unwrap();
    assert!(
        refused.contains("sslmode=allow-anything is not one of"),
        "{refused}"
    );
    let missing =
        parse("postgres://sy@db/gateway?sslmode=verify-full&sslrootcert=/nonexistent.pem");
    assert!(
        missing
            .err()
            .unwrap()
            .contains("sslrootcert `/nonexistent.pem` is not a file")
    );
    let no_db = parse("postgres://sy@db").err().unwrap();
    assert!(no_db.contains("names no database"), "{no_db}");
}
