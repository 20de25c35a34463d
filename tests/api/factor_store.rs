//! The storage of second factors (SPEC §11) on both backends: each TOTP step
//! and recovery code spent once (also when two try at once), passkeys whose
//! sign count only grows, ceremonies taken once, and the password change
//! that ends the user's other sessions.

use crate::helpers::{on_both_backends, Backend, TestDb};
use std::sync::Arc;
use tally::domain::{new_id, now_micros};
use tally::store::{Ceremony, NewUser, PasskeyRow, Store};

on_both_backends!(
    a_totp_step_is_spent_once_and_no_earlier_step_after_it,
    a_recovery_code_is_spent_once_even_by_two_at_once,
    new_recovery_codes_replace_the_old_ones,
    a_passkey_use_is_recorded_only_when_its_sign_count_grew,
    a_ceremony_is_taken_once_and_not_after_it_expires,
    resetting_factors_removes_them_all_and_counts_them,
    a_password_change_ends_the_sessions_signed_in_before_it,
);

async fn store_with_user(backend: Backend) -> Option<(TestDb, Arc<dyn Store>, String)> {
    let db = TestDb::new(backend).await?;
    let store = db.store().await;
    let user = store
        .insert_user(&NewUser {
            id: new_id(),
            username: format!("f{}", &new_id()[24..]),
            first_name: "F".to_owned(),
            last_name: "L".to_owned(),
            about: String::new(),
            email: None,
            phone: None,
            password_hash: "$argon2id$not-a-real-hash".to_owned(),
            verified: true,
            date_joined: now_micros(),
        })
        .await
        .unwrap();
    Some((db, store, user.id))
}

fn digests(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("digest-{i}-{}", new_id())).collect()
}

async fn a_totp_step_is_spent_once_and_no_earlier_step_after_it(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    assert!(store
        .begin_totp(&user, "sealed-1", now_micros())
        .await
        .unwrap());
    // Not a factor until confirmed: no step can be spent.
    assert!(!store.use_totp_step(&user, 100).await.unwrap());
    assert!(!store.factors(&user).await.unwrap().has_totp());
    let codes = digests(10);
    assert!(store
        .confirm_totp(&user, 100, now_micros(), Some(&codes))
        .await
        .unwrap());
    let factors = store.factors(&user).await.unwrap();
    assert!(factors.has_totp());
    assert_eq!(factors.recovery_codes_left, 10);
    // A second set-up while one is confirmed is refused.
    assert!(!store
        .begin_totp(&user, "sealed-2", now_micros())
        .await
        .unwrap());
    assert!(
        !store.use_totp_step(&user, 100).await.unwrap(),
        "the confirming step"
    );
    assert!(store.use_totp_step(&user, 101).await.unwrap());
    assert!(!store.use_totp_step(&user, 101).await.unwrap());
    assert!(!store.use_totp_step(&user, 100).await.unwrap());
    // Two at once with one code: one wins.
    let (a, b) = tokio::join!(
        store.use_totp_step(&user, 102),
        store.use_totp_step(&user, 102)
    );
    assert!(a.unwrap() ^ b.unwrap());
    assert!(store.remove_totp(&user).await.unwrap());
    assert!(!store.factors(&user).await.unwrap().any());
}

async fn a_recovery_code_is_spent_once_even_by_two_at_once(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    let codes = digests(10);
    store
        .replace_recovery_codes(&user, &codes, now_micros())
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        store.use_recovery_code(&user, &codes[0], now_micros()),
        store.use_recovery_code(&user, &codes[0], now_micros())
    );
    assert!(a.unwrap() ^ b.unwrap());
    assert!(!store
        .use_recovery_code(&user, "not-a-code", now_micros())
        .await
        .unwrap());
    assert_eq!(store.factors(&user).await.unwrap().recovery_codes_left, 9);
}

async fn new_recovery_codes_replace_the_old_ones(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    let old = digests(10);
    store
        .replace_recovery_codes(&user, &old, now_micros())
        .await
        .unwrap();
    let new = digests(10);
    store
        .replace_recovery_codes(&user, &new, now_micros())
        .await
        .unwrap();
    assert!(!store
        .use_recovery_code(&user, &old[0], now_micros())
        .await
        .unwrap());
    assert!(store
        .use_recovery_code(&user, &new[0], now_micros())
        .await
        .unwrap());
}

fn passkey(user: &str, id: &str) -> PasskeyRow {
    PasskeyRow {
        credential_id: id.to_owned(),
        user_id: user.to_owned(),
        name: "Key".to_owned(),
        credential: "{}".to_owned(),
        sign_count: 1,
        backup_eligible: false,
        created_at: now_micros(),
        last_used_at: None,
    }
}

async fn a_passkey_use_is_recorded_only_when_its_sign_count_grew(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    let id = format!("cred-{}", new_id());
    assert!(store
        .insert_passkey(&passkey(&user, &id), None)
        .await
        .unwrap());
    assert!(
        !store
            .insert_passkey(&passkey(&user, &id), None)
            .await
            .unwrap(),
        "twice"
    );
    assert!(store
        .record_passkey_use(&id, "{\"n\":2}", 2, now_micros())
        .await
        .unwrap());
    assert!(!store
        .record_passkey_use(&id, "{\"n\":2}", 2, now_micros())
        .await
        .unwrap());
    assert!(!store
        .record_passkey_use(&id, "{\"n\":1}", 1, now_micros())
        .await
        .unwrap());
    let row = store.find_passkey(&id).await.unwrap().unwrap();
    assert_eq!(row.sign_count, 2);
    assert!(row.last_used_at.is_some());
    // Someone else's passkey is not removed by this user.
    assert!(!store.remove_passkey("someone-else", &id).await.unwrap());
    assert!(store.remove_passkey(&user, &id).await.unwrap());
    assert!(store.find_passkey(&id).await.unwrap().is_none());
}

async fn a_ceremony_is_taken_once_and_not_after_it_expires(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    let ceremony = Ceremony {
        user_id: Some(user.clone()),
        kind: "register".to_owned(),
        state: "{\"state\":1}".to_owned(),
    };
    let now = now_micros();
    store
        .insert_ceremony("c1", &ceremony, now + 60_000_000)
        .await
        .unwrap();
    store
        .insert_ceremony("c2", &ceremony, now - 1)
        .await
        .unwrap();
    let taken = store.take_ceremony("c1", now).await.unwrap().unwrap();
    assert_eq!(taken.state, ceremony.state);
    assert_eq!(taken.user_id.as_deref(), Some(user.as_str()));
    assert!(store.take_ceremony("c1", now).await.unwrap().is_none());
    assert!(
        store.take_ceremony("c2", now).await.unwrap().is_none(),
        "expired"
    );
}

async fn resetting_factors_removes_them_all_and_counts_them(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    store
        .begin_totp(&user, "sealed", now_micros())
        .await
        .unwrap();
    store
        .confirm_totp(&user, 1, now_micros(), Some(&digests(10)))
        .await
        .unwrap();
    for _ in 0..2 {
        let id = format!("cred-{}", new_id());
        store
            .insert_passkey(&passkey(&user, &id), None)
            .await
            .unwrap();
    }
    assert_eq!(store.factors(&user).await.unwrap().count(), 3);
    assert_eq!(store.reset_factors(&user).await.unwrap(), 3);
    let factors = store.factors(&user).await.unwrap();
    assert!(!factors.any());
    assert_eq!(factors.recovery_codes_left, 0);
    assert_eq!(store.reset_factors(&user).await.unwrap(), 0);
}

async fn a_password_change_ends_the_sessions_signed_in_before_it(backend: Backend) {
    let Some((_db, store, user)) = store_with_user(backend).await else {
        return;
    };
    let before = now_micros();
    assert!(!store.session_ended("s1", &user, before).await.unwrap());
    store
        .change_password(&user, "$argon2id$new", before + 10)
        .await
        .unwrap();
    assert!(store.session_ended("s1", &user, before).await.unwrap());
    assert!(!store.session_ended("s2", &user, before + 10).await.unwrap());
    assert!(!store.session_ended("s3", &user, before + 20).await.unwrap());
    let found = store
        .find_user(tally::store::UserKey::Id(&user))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.password_hash, "$argon2id$new");
}
