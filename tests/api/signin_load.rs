//! Sign-ins hash passwords on a few threads of their own: many sign-ins at
//! once neither stop the API nor grow the server's memory with each hash.

use crate::browser::Browser;
use crate::helpers::{on_both_backends, Backend, ServeProcess, TestDb};
use crate::oauth_fixture::PASSWORD;
use tally::auth::password::PasswordHasher;

on_both_backends!(parallel_sign_ins_leave_the_api_answering_in_bounded_memory);

/// Resident memory of a process, in KiB (Linux).
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn parallel_sign_ins_leave_the_api_answering_in_bounded_memory(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store().await;
    // One account per browser: parallel attempts on one account are throttled.
    let hasher = PasswordHasher::new(1);
    let mut accounts = Vec::new();
    for n in 0..8 {
        let user = tally::admin::user_add(
            store.as_ref(),
            &hasher,
            tally::admin::UserAdd {
                username: format!("user{n}"),
                password: PASSWORD.to_owned(),
                verified: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        accounts.push(user);
    }
    let ann = &accounts[0];
    let scopes = tally::domain::ScopeSet::parse("access_profile").unwrap();
    let token = tally::oauth::tokens::issue_personal_access_token(store.as_ref(), &ann.id, &scopes)
        .await
        .unwrap();
    let server = ServeProcess::start(
        &db.url_string(),
        &[
            ("TALLY_OAUTH_RATE_LIMIT", "100000"),
            ("TALLY_API_RATE_LIMIT", "100000"),
        ],
    );
    let origin = server.origin.clone();

    // 8 browsers sign in 13 times each (each its own account), all at once, while
    // /me is asked: 104 sign-ins, past the 100 that issue 10 bounds memory after.
    let sign_ins = futures_util::future::join_all(accounts.iter().map(|account| {
        let origin = origin.clone();
        let username = account.username.clone();
        async move {
            for _ in 0..13 {
                let browser = Browser::new(&origin);
                let page = browser.get("/signin").await;
                let answer = browser.sign_in(&page, &username, PASSWORD).await;
                assert_eq!(
                    answer.location().as_deref(),
                    Some("/account"),
                    "{} {}",
                    answer.status,
                    answer.text()
                );
            }
        }
    }));
    let done = std::sync::atomic::AtomicBool::new(false);
    let api = async {
        let http = reqwest::Client::new();
        let mut answered = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let response = http
                .get(format!("{origin}/v1/me"))
                .bearer_auth(token.expose())
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            answered += 1;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        answered
    };
    let (_, answered) = tokio::join!(
        async {
            sign_ins.await;
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        },
        api
    );
    assert!(answered > 0);
    // A hash's 19 MiB is freed when it is done and taken again by the next
    // (mimalloc reuses it): far below a hash's memory per sign-in, which the
    // system allocator once grew the server to (past 500 MiB).
    let resident_mib = resident_kib(server.pid()) / 1024;
    assert!(
        resident_mib < 96,
        "{resident_mib} MiB resident after 104 sign-ins"
    );
}
