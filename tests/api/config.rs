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

#[test]
fn a_config_file_adds_settings_the_environment_overrides_and_refuses_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let from_file = format!("sqlite://{}/from-file.db", dir.path().display());
    let from_env = format!("sqlite://{}/from-env.db", dir.path().display());
    let file = dir.path().join("tally.env");
    std::fs::write(
        &file,
        format!(
            "# Tally's settings\nTALLY_DATABASE_URL=\"{from_file}\"\nTALLY_SETTLEMENT_DELAY=5s\n"
        ),
    )
    .unwrap();
    let config = file.to_str().unwrap();

    // The file's database is the one migrated.
    let run = tally_with_env(&[("TALLY_CONFIG", config)], &["migrate"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(dir.path().join("from-file.db").exists());

    // The environment wins over the file.
    let run = tally_with_env(
        &[("TALLY_CONFIG", config), ("TALLY_DATABASE_URL", &from_env)],
        &["migrate"],
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert!(dir.path().join("from-env.db").exists());

    // A value in the file is checked like any other setting.
    std::fs::write(&file, "TALLY_SETTLEMENT_DELAY=soon\n").unwrap();
    let run = tally_with_env(&[("TALLY_CONFIG", config)], &["migrate"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        run.stderr.contains("TALLY_SETTLEMENT_DELAY"),
        "{}",
        run.stderr
    );

    // A misspelt name, or a file that cannot be read, stops the start too.
    std::fs::write(
        &file,
        format!("TALLY_DATABASE_URL={from_file}\nTALLY_LISTN=x\n"),
    )
    .unwrap();
    for path in [config, "/no/such/tally.env"] {
        let run = tally_with_env(&[("TALLY_CONFIG", path)], &["migrate"]);
        assert_eq!(run.status.code(), Some(2), "{path}");
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{:?}", run.stderr);
        assert!(lines[0].contains("TALLY_CONFIG"), "{}", lines[0]);
    }
    let run = tally_with_env(&[("TALLY_CONFIG", config)], &["migrate"]);
    assert!(run.stderr.contains("TALLY_LISTN"), "{}", run.stderr);
}
