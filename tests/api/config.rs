//! Bad settings stop the start with one line naming the setting, and exit code 2.

use crate::helpers::tally_with_env;

#[test]
fn a_bad_setting_stops_the_start_with_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/t.db", dir.path().display());
    for (name, value) in [
        ("TALLY_LISTEN", "not-an-address"),
        ("TALLY_SETTLEMENT_DELAY", "soon"),
        ("TALLY_DATABASE_URL", "mysql://localhost/tally"),
        ("TALLY_DEVELOPER_SIGNUP", "sometimes"),
        ("TALLY_SECRET_KEY", "too-short"),
        ("TALLY_TLS_CERT", "/no/such/cert.pem"),
    ] {
        let mut env = vec![("TALLY_DATABASE_URL", db.as_str())];
        env.push((name, value));
        for command in [&["serve"][..], &["admin", "audit", "--json"][..]] {
            let run = tally_with_env(&env, command);
            assert_eq!(run.status.code(), Some(2), "{name}={value}");
            let lines: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{name}={value}: {:?}", run.stderr);
            assert!(lines[0].contains(name), "{name}={value}: {}", lines[0]);
        }
    }
}
