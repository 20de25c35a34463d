//! The behaviour every `Store` must have, run against SQLite and PostgreSQL.

use crate::helpers::{on_both_backends, Backend, TestDb};
use std::sync::Arc;
use tally::domain::{now_micros, Amount, PaymentStatus};
use tally::ledger;
use tally::store::{EntryKind, NewApp, NewUser, Presented, Store, StoreError, UserFlags, UserKey};

/// The settlement delay of the pays these tests make through the ledger: not
/// 0, so they stay pending (none settles with its own write) until the tests'
/// own worker rounds (`run_workers_once`) settle them.
const LATER: std::time::Duration = std::time::Duration::from_secs(3600);

on_both_backends!(
    users_are_found_by_id_username_email_and_phone,
    usernames_emails_and_phones_are_unique,
    verifying_an_account_verifies_its_contacts,
    friendships_are_symmetric_and_idempotent,
    apps_are_stored_suspended_and_rotated,
    deposits_credit_the_account_and_keep_the_ledger_balanced,
    concurrent_deposits_into_one_account_all_count,
    the_first_stored_server_setting_wins,
    a_forgotten_server_setting_is_gone,
    the_audit_finds_a_balance_changed_behind_the_ledgers_back,
    the_audit_finds_money_made_from_nothing_and_an_account_no_one_has,
    the_audit_finds_held_money_that_no_pending_pay_explains,
    the_audit_finds_a_settlement_credited_to_the_wrong_account,
    the_audit_holds_every_payment_to_the_refund_rule,
    the_audit_reads_payments_in_chunks_and_misses_nothing_at_their_edges,
    an_expiry_decided_before_a_claim_does_not_overtake_it,
    a_settlement_decided_before_a_suspension_does_not_credit_the_account,
    a_settlement_batch_settles_each_due_pay_once_and_passes_by_the_rest,
    settling_what_is_due_takes_the_oldest_due_pays_to_active_accounts_once,
    a_settlement_round_larger_than_a_slice_settles_as_many_as_asked,
    a_refresh_token_rotates_once_for_its_own_client_while_live,
    a_payment_row_with_an_unknown_word_does_not_load,
    pays_made_at_once_each_move_their_own_money_or_none,
    a_pay_that_fails_its_batch_fails_alone,
    every_way_a_payment_settles_writes_the_ledger_rows_the_audit_expects,
    a_pay_that_cannot_settle_leaves_the_others_of_its_round_settled,
    every_settlement_writes_the_moves_of_the_ledgers_rule,
);

fn presented<'a>(digest: &'a str, client_id: &'a str, now: i64) -> Presented<'a> {
    Presented {
        digest,
        client_id,
        now,
    }
}

fn new_user(username: &str, email: Option<&str>, phone: Option<&str>) -> NewUser {
    NewUser {
        id: tally::domain::new_id(),
        username: username.to_owned(),
        first_name: "First".to_owned(),
        last_name: "Last".to_owned(),
        about: String::new(),
        email: email.map(str::to_owned),
        phone: phone.map(str::to_owned),
        password_hash: "$argon2id$not-a-real-hash".to_owned(),
        verified: false,
        date_joined: now_micros(),
    }
}

async fn store_for(backend: Backend) -> Option<(TestDb, Arc<dyn Store>)> {
    let db = TestDb::new(backend).await?;
    let store = db.store().await;
    Some((db, store))
}

async fn users_are_found_by_id_username_email_and_phone(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let user = store
        .insert_user(&new_user(
            "Ann_Lee",
            Some("ann@example.com"),
            Some("+12125550187"),
        ))
        .await
        .unwrap();
    assert_eq!(user.balance_cents, 0);
    assert!(!user.verified && !user.suspended);
    for key in [
        UserKey::Id(&user.id),
        UserKey::Username("ann_lee"),
        UserKey::Username("ANN_LEE"),
        UserKey::Email("ann@example.com"),
        UserKey::Phone("+12125550187"),
    ] {
        let found = store.find_user(key).await.unwrap();
        assert_eq!(found.map(|u| u.id), Some(user.id.clone()), "{key:?}");
    }
    assert!(store
        .find_user(UserKey::Username("nobody"))
        .await
        .unwrap()
        .is_none());
}

async fn usernames_emails_and_phones_are_unique(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let verified = |mut user: NewUser| {
        user.verified = true;
        user
    };
    // An unverified address may be held twice: nobody can keep it from its
    // owner by signing up with it first.
    for name in ["ann0", "ann1"] {
        store
            .insert_user(&new_user(
                name,
                Some("ann@example.com"),
                Some("+12125550187"),
            ))
            .await
            .unwrap();
    }
    let ann = store
        .insert_user(&verified(new_user(
            "ann",
            Some("ann@example.com"),
            Some("+12125550187"),
        )))
        .await
        .unwrap();
    // Found by address: the account that verified it.
    for key in [
        UserKey::Email("ann@example.com"),
        UserKey::Phone("+12125550187"),
    ] {
        let found = store.find_user(key).await.unwrap().unwrap();
        assert_eq!(found.id, ann.id, "{key:?}");
    }
    for (user, field) in [
        (new_user("ANN", None, None), "username"),
        (
            verified(new_user("ann2", Some("ann@example.com"), None)),
            "email",
        ),
        (
            verified(new_user("ann3", None, Some("+12125550187"))),
            "phone",
        ),
    ] {
        match store.insert_user(&user).await {
            Err(StoreError::Conflict(f)) => assert_eq!(f, field),
            other => panic!("expected a conflict on {field}, got {other:?}"),
        }
    }
    // Several accounts without e-mail or phone are fine.
    store
        .insert_user(&new_user("ben", None, None))
        .await
        .unwrap();
    store
        .insert_user(&new_user("cat", None, None))
        .await
        .unwrap();
}

async fn verifying_an_account_verifies_its_contacts(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let user = store
        .insert_user(&new_user("ann", Some("ann@example.com"), None))
        .await
        .unwrap();
    assert!(!user.email_verified);
    let verified = store
        .update_user_flags(
            &user.id,
            UserFlags {
                verified: Some(true),
                suspended: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(verified.verified && verified.email_verified && !verified.phone_verified);
    let suspended = store
        .update_user_flags(
            &user.id,
            UserFlags {
                verified: None,
                suspended: Some(true),
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(suspended.verified && suspended.suspended);
    let missing = store
        .update_user_flags(
            "no-such-id",
            UserFlags {
                verified: Some(true),
                suspended: None,
            },
        )
        .await
        .unwrap();
    assert!(missing.is_none());
}

async fn friendships_are_symmetric_and_idempotent(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let a = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let b = store
        .insert_user(&new_user("ben", None, None))
        .await
        .unwrap();
    let c = store
        .insert_user(&new_user("cat", None, None))
        .await
        .unwrap();
    store
        .add_friendship(&a.id, &b.id, now_micros())
        .await
        .unwrap();
    store
        .add_friendship(&b.id, &a.id, now_micros())
        .await
        .unwrap();
    assert!(store.are_friends(&a.id, &b.id).await.unwrap());
    assert!(store.are_friends(&b.id, &a.id).await.unwrap());
    assert!(!store.are_friends(&a.id, &c.id).await.unwrap());
}

async fn apps_are_stored_suspended_and_rotated(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let owner = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let app = store
        .insert_app(&NewApp {
            client_id: "client-1".to_owned(),
            secret_digest: "digest-1".to_owned(),
            name: "My App".to_owned(),
            description: "Does things".to_owned(),
            redirect_url: Some("https://app.example.com/cb".to_owned()),
            site_url: None,
            owner_id: owner.id.clone(),
            created_at: now_micros(),
        })
        .await
        .unwrap();
    assert!(!app.suspended);
    let found = store.find_app("client-1").await.unwrap().unwrap();
    assert_eq!(found.name, "My App");
    assert_eq!(found.owner_id, owner.id);
    let suspended = store
        .set_app_suspended("client-1", true)
        .await
        .unwrap()
        .unwrap();
    assert!(suspended.suspended);
    // Only the owner may replace the secret or the details.
    assert!(!store
        .replace_app_secret("someone-else", "client-1", "digest-x")
        .await
        .unwrap());
    assert!(store
        .replace_app_secret(&owner.id, "client-1", "digest-2")
        .await
        .unwrap());
    let update = tally::store::AppUpdate {
        name: "Renamed".to_owned(),
        description: String::new(),
        redirect_url: Some("https://other.example.com/cb".to_owned()),
        site_url: None,
    };
    assert!(store
        .update_own_app("someone-else", "client-1", &update)
        .await
        .unwrap()
        .is_none());
    let updated = store
        .update_own_app(&owner.id, "client-1", &update)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.name, "Renamed");
    assert_eq!(updated.secret_digest, "digest-2");
    assert!(store
        .set_app_suspended("nope", true)
        .await
        .unwrap()
        .is_none());
}

async fn deposits_credit_the_account_and_keep_the_ledger_balanced(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let user = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let amount = Amount::parse_positive("12.34").unwrap();
    let balance = ledger::deposit(store.as_ref(), &user.id, amount)
        .await
        .unwrap();
    assert_eq!(balance.cents(), 1234);
    let balance = ledger::deposit(store.as_ref(), &user.id, amount)
        .await
        .unwrap();
    assert_eq!(balance.cents(), 2468);
    let report = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(report.ok, "{:?}", report.discrepancies);
    assert_eq!(report.accounts, 1);
    assert_eq!(report.total_balance.cents(), 2468);
    assert!(matches!(
        ledger::deposit(store.as_ref(), "no-such-user", amount).await,
        Err(StoreError::NotFound(_))
    ));
}

async fn concurrent_deposits_into_one_account_all_count(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let user = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            let id = user.id.clone();
            tokio::spawn(async move {
                ledger::deposit(store.as_ref(), &id, Amount::parse_positive("1.01").unwrap()).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let user = store
        .find_user(UserKey::Id(&user.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.balance_cents, 16 * 101);
    assert_audit_ok(store.as_ref()).await;
}

async fn the_first_stored_server_setting_wins(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let first = store
        .server_setting_or_insert("an example setting", "first")
        .await
        .unwrap();
    let second = store
        .server_setting_or_insert("an example setting", "second")
        .await
        .unwrap();
    assert_eq!((first.as_str(), second.as_str()), ("first", "first"));
}

async fn a_forgotten_server_setting_is_gone(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    assert_eq!(store.server_setting("kept").await.unwrap(), None);
    for key in ["kept", "forgotten"] {
        store.server_setting_or_insert(key, key).await.unwrap();
    }
    assert!(store.forget_server_setting("forgotten").await.unwrap());
    assert!(!store.forget_server_setting("forgotten").await.unwrap());
    assert_eq!(store.server_setting("forgotten").await.unwrap(), None);
    assert_eq!(
        store.server_setting("kept").await.unwrap().as_deref(),
        Some("kept")
    );
}

async fn the_audit_finds_a_balance_changed_behind_the_ledgers_back(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let user = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    ledger::deposit(
        store.as_ref(),
        &user.id,
        Amount::parse_positive("5").unwrap(),
    )
    .await
    .unwrap();
    tamper(&db, "UPDATE users SET balance_cents = balance_cents + 100").await;
    let report = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(!report.ok);
    assert_eq!(report.discrepancies.len(), 1, "{:?}", report.discrepancies);
}

/// The sums the audit takes by movement and by account, each exact to the cent.
async fn the_audit_finds_money_made_from_nothing_and_an_account_no_one_has(backend: Backend) {
    use ledger::audit::Discrepancy;
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("5").unwrap())
        .await
        .unwrap();
    // A deposit's credit made a cent larger, balance and all, and a
    // movement of its own between two accounts no user has.
    for sql in [
        format!(
            "UPDATE ledger_entries SET amount_cents = amount_cents + 1 WHERE account = '{0}'; \
             UPDATE users SET balance_cents = balance_cents + 1 WHERE id = '{0}'",
            ann.id
        ),
        "INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, \
         created_at) VALUES ('m', 'deposit', 'ghost', 2500, NULL, 1), \
         ('m', 'deposit', '@external', -2500, NULL, 1)"
            .to_owned(),
    ] {
        tamper(&db, &sql).await;
    }
    let report = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(!report.ok);
    let cents = tally::domain::Money::from_cents;
    assert!(
        matches!(
            &report.discrepancies[..],
            [
                Discrepancy::UnbalancedMovement { movement, sum },
                Discrepancy::UnknownAccount { account, ledger },
            ] if !movement.is_empty() && movement != "m" && *sum == cents(1)
                && account == "ghost" && *ledger == cents(2500)
        ),
        "{:?}",
        report.discrepancies
    );
}

/// A payment's words are decoded where the row is read: a row another program
/// wrote with a word Tally does not know fails to load, rather than reaching the
/// ledger as a string no rule matches.
async fn a_payment_row_with_an_unknown_word_does_not_load(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    let made = pay_four(
        store.as_ref(),
        &ann,
        ledger::payments::TargetAddress::UserId(bob.id.clone()),
    )
    .await;
    let found = store
        .find_payments(std::slice::from_ref(&made.payment.id))
        .await
        .unwrap();
    assert_eq!(found[0].status, PaymentStatus::Pending);
    tamper(&db, "UPDATE payments SET status = 'lost'").await;
    let error = store.find_payments(&[made.payment.id]).await.unwrap_err();
    assert!(matches!(error, StoreError::Unexpected(_)), "{error:?}");
    assert!(
        format!("{error:?}").contains("'lost' is not a payment status"),
        "{error:?}"
    );
}

async fn the_audit_finds_held_money_that_no_pending_pay_explains(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let mut ann = new_user("ann", None, None);
    ann.verified = true;
    let ann = store.insert_user(&ann).await.unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    pay_four(
        store.as_ref(),
        &ann,
        ledger::payments::TargetAddress::UserId(bob.id.clone()),
    )
    .await;
    // Held money is part of the books: the audit holds while the pay is pending.
    assert_audit_ok(store.as_ref()).await;
    tamper(&db, "UPDATE payments SET status = 'cancelled'").await;
    let report = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(!report.ok);
    use ledger::audit::Discrepancy;
    assert_eq!(
        report.discrepancies[0],
        Discrepancy::HeldMismatch {
            held: tally::domain::Money::from_cents(400),
            pending_pays: tally::domain::Money::from_cents(0),
        }
    );
    // The payment itself is named too: cancelled, yet its money is still held
    // and no refund returned it.
    assert!(matches!(
        report.discrepancies[1..],
        [
            Discrepancy::PaymentMismatch { .. },
            Discrepancy::RefundMismatch { .. }
        ]
    ));
}

/// A returned pay has exactly one refund, of its amount, to its actor; no other
/// payment has one. Each way of breaking that rule is named, and only it.
async fn the_audit_holds_every_payment_to_the_refund_rule(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob) = (&users[0], &users[1]);
    let to_bob = || ledger::payments::TargetAddress::UserId(bob.id.clone());
    let returned = pay_four(store.as_ref(), ann, to_bob()).await.payment;
    ledger::payments::update(
        store.as_ref(),
        ann,
        &returned.id,
        ledger::payments::Update::Cancel,
        None,
        now_micros(),
    )
    .await
    .unwrap();
    let settled = pay_four(store.as_ref(), ann, to_bob()).await.payment;
    run_workers_once(store.as_ref()).await;
    assert_audit_ok(store.as_ref()).await;

    let refund = format!(
        "(SELECT refund_payment_id FROM payments WHERE id = '{}')",
        returned.id
    );
    let broken = [
        (
            format!("UPDATE payments SET amount_cents = 300 WHERE id = {refund}"),
            &returned.id,
            "the refund's amount differs from the pay's",
            format!("UPDATE payments SET amount_cents = 400 WHERE id = {refund}"),
        ),
        (
            format!(
                "UPDATE payments SET target_user_id = '{}' WHERE id = {refund}",
                bob.id
            ),
            &returned.id,
            "the refund does not go to the pay's actor",
            format!(
                "UPDATE payments SET target_user_id = '{}' WHERE id = {refund}",
                ann.id
            ),
        ),
        (
            format!(
                "UPDATE payments SET refund_payment_id = NULL WHERE id = '{}'",
                returned.id
            ),
            &returned.id,
            "a returned pay has no refund",
            format!(
                "UPDATE payments SET refund_payment_id = \
                 (SELECT id FROM payments WHERE kind = 'refund') WHERE id = '{}'",
                returned.id
            ),
        ),
        (
            format!(
                "UPDATE payments SET refund_payment_id = {refund} WHERE id = '{}'",
                settled.id
            ),
            &settled.id,
            "a settled pay has a refund",
            format!(
                "UPDATE payments SET refund_payment_id = NULL WHERE id = '{}'",
                settled.id
            ),
        ),
    ];
    use ledger::audit::Discrepancy;
    for (break_it, payment, problem, mend_it) in broken {
        tamper(&db, &break_it).await;
        let report = ledger::audit::run(store.as_ref()).await.unwrap();
        assert_eq!(
            report.discrepancies,
            [Discrepancy::RefundMismatch {
                payment: payment.clone(),
                problem: problem.to_owned(),
            }],
            "{break_it}"
        );
        tamper(&db, &mend_it).await;
        assert_audit_ok(store.as_ref()).await;
    }
}

async fn the_audit_finds_a_settlement_credited_to_the_wrong_account(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    let eve = store
        .insert_user(&new_user("eve", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    let made = pay_four(
        store.as_ref(),
        &ann,
        ledger::payments::TargetAddress::UserId(bob.id.clone()),
    )
    .await;
    run_workers_once(store.as_ref()).await;
    assert_audit_ok(store.as_ref()).await;
    // Entries on two accounts the payment does not name, each netting to
    // nothing, move no money: the payment is checked in full and passes.
    tamper(
        &db,
        &format!(
            "INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, \
             payment_id, created_at) VALUES ('x', 'settle', '{0}', 7, '{1}', 1), \
             ('x', 'settle', '{0}', -7, '{1}', 1), ('x', 'settle', '@external', 3, '{1}', 1), \
             ('x', 'settle', '@external', -3, '{1}', 1)",
            eve.id, made.payment.id
        ),
    )
    .await;
    assert_audit_ok(store.as_ref()).await;
    // Eve gets bob's money, with balances and entries that agree with each
    // other: only the payment's own record tells.
    for sql in [
        format!(
            "UPDATE ledger_entries SET account = '{}' WHERE kind = 'settle' AND account = '{}'",
            eve.id, bob.id
        ),
        format!("UPDATE users SET balance_cents = 0 WHERE id = '{}'", bob.id),
        format!(
            "UPDATE users SET balance_cents = 400 WHERE id = '{}'",
            eve.id
        ),
    ] {
        tamper(&db, &sql).await;
    }
    let report = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(!report.ok);
    assert!(
        matches!(
            &report.discrepancies[..],
            [ledger::audit::Discrepancy::PaymentMismatch { payment, .. }] if *payment == made.payment.id
        ),
        "{:?}",
        report.discrepancies
    );
}

async fn an_expiry_decided_before_a_claim_does_not_overtake_it(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let bob = store
        .insert_user(&new_user("bob", Some("bob@example.com"), None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    let made = pay_four(
        store.as_ref(),
        &ann,
        ledger::payments::TargetAddress::Email(
            tally::domain::Email::parse("bob@example.com").unwrap(),
        ),
    )
    .await;
    assert!(
        made.payment.target_user_id.is_none(),
        "bob has not verified it"
    );
    // The worker saw it unclaimed; then bob verified the address.
    let due = store.due_payments(0, i64::MAX, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    let claimed = store
        .claim_payments(
            tally::store::Claimant {
                user_id: &bob.id,
                email: Some("bob@example.com"),
                phone: None,
            },
            now_micros(),
        )
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    let expiry = tally::store::Transition {
        unclaimed_only: true,
        ..release_held(
            &made.payment.id,
            PaymentStatus::Expired,
            EntryKind::Refund,
            &ann.id,
        )
    };
    let outcome = store.apply_transition(&expiry).await.unwrap();
    assert!(
        matches!(outcome, tally::store::TransitionOutcome::NotPending),
        "{outcome:?}"
    );
    assert_audit_ok(store.as_ref()).await;
}

async fn a_settlement_decided_before_a_suspension_does_not_credit_the_account(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    let made = pay_four(
        store.as_ref(),
        &ann,
        ledger::payments::TargetAddress::UserId(bob.id.clone()),
    )
    .await;
    // The worker saw bob active; then an operator suspended him.
    let due = store.due_payments(i64::MAX, 0, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].target_suspended, Some(false));
    store
        .update_user_flags(
            &bob.id,
            tally::store::UserFlags {
                verified: None,
                suspended: Some(true),
            },
        )
        .await
        .unwrap();
    let settle = tally::store::Transition {
        only_if_active: Some(bob.id.clone()),
        idempotency: None,
        ..release_held(
            &made.payment.id,
            PaymentStatus::Settled,
            EntryKind::Settle,
            &bob.id,
        )
    };
    let outcome = store.apply_transition(&settle).await.unwrap();
    assert!(
        matches!(outcome, tally::store::TransitionOutcome::NotPending),
        "{outcome:?}"
    );
    // The next round fails it and refunds ann.
    run_workers_once(store.as_ref()).await;
    let payment = store.find_payments(&[made.payment.id]).await.unwrap();
    assert_eq!(payment[0].status, PaymentStatus::Failed);
    assert_audit_ok(store.as_ref()).await;
}

async fn a_settlement_batch_settles_each_due_pay_once_and_passes_by_the_rest(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob, cy) = (&users[0], &users[1], &users[2]);
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    let to_bob = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let again_to_bob = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let to_cy = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let cancelled = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    ledger::payments::update(
        store.as_ref(),
        ann,
        &cancelled.id,
        ledger::payments::Update::Cancel,
        None,
        now_micros(),
    )
    .await
    .unwrap();
    // Suspended after the worker looked: passed by, not credited.
    store
        .update_user_flags(
            &cy.id,
            UserFlags {
                verified: None,
                suspended: Some(true),
            },
        )
        .await
        .unwrap();
    let batch: Vec<tally::store::Settlement> = [&to_bob, &again_to_bob, &to_cy, &cancelled]
        .iter()
        .map(|p| tally::store::Settlement {
            payment_id: p.id.clone(),
            movement_id: tally::domain::new_id(),
        })
        .collect();
    let mut settled = store.settle_payments(&batch, now_micros()).await.unwrap();
    settled.sort();
    let mut expected = vec![to_bob.id.clone(), again_to_bob.id.clone()];
    expected.sort();
    assert_eq!(settled, expected);
    assert!(store
        .settle_payments(&batch, now_micros())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 800);
    assert_eq!(balance_of(store.as_ref(), &cy.id).await, 0);
    assert_eq!(balance_of(store.as_ref(), &ann.id).await, 2000 - 1200);
    let ids = [to_bob.id, again_to_bob.id, to_cy.id, cancelled.id];
    let mut statuses: Vec<(String, PaymentStatus)> = store
        .find_payments(&ids)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.status))
        .collect();
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(String, PaymentStatus)> = ids
        .iter()
        .zip([
            PaymentStatus::Settled,
            PaymentStatus::Settled,
            PaymentStatus::Pending,
            PaymentStatus::Cancelled,
        ])
        .map(|(id, status)| (id.clone(), status))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(statuses, want);
    assert_audit_ok(store.as_ref()).await;
}

async fn settling_what_is_due_takes_the_oldest_due_pays_to_active_accounts_once(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob, cy) = (&users[0], &users[1], &users[2]);
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    let first = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let to_cy = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let second = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let settle_by = now_micros();
    let not_yet_due = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    store
        .update_user_flags(
            &cy.id,
            UserFlags {
                verified: None,
                suspended: Some(true),
            },
        )
        .await
        .unwrap();
    // The oldest first, as many as asked for; the suspended account's pay
    // and the pay made after `settle_by` are passed by.
    assert_eq!(
        store.settle_due(settle_by, now_micros(), 1).await.unwrap(),
        1
    );
    let status = |id: String| {
        let store = store.clone();
        async move { store.find_payments(&[id]).await.unwrap()[0].status }
    };
    assert_eq!(status(first.id.clone()).await, PaymentStatus::Settled);
    assert_eq!(status(second.id.clone()).await, PaymentStatus::Pending);
    assert_eq!(
        store.settle_due(settle_by, now_micros(), 10).await.unwrap(),
        1
    );
    assert_eq!(
        store.settle_due(settle_by, now_micros(), 10).await.unwrap(),
        0
    );
    assert_eq!(status(second.id).await, PaymentStatus::Settled);
    assert_eq!(status(to_cy.id).await, PaymentStatus::Pending);
    assert_eq!(status(not_yet_due.id).await, PaymentStatus::Pending);
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 800);
    assert_audit_ok(store.as_ref()).await;
}

/// SQLite commits a round in slices of 64 (`SETTLEMENT_SLICE`): a round of
/// 100 spans two, and one of 200 ends early when the due pays run out.
async fn a_settlement_round_larger_than_a_slice_settles_as_many_as_asked(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob) = (&users[0], &users[1]);
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("600").unwrap())
        .await
        .unwrap();
    let mut pays = Vec::new();
    for _ in 0..150 {
        let to_bob = ledger::payments::TargetAddress::UserId(bob.id.clone());
        pays.push(pay_four(store.as_ref(), ann, to_bob).await.payment.id);
    }
    let settle_by = now_micros();
    assert_eq!(
        store
            .settle_due(settle_by, now_micros(), 100)
            .await
            .unwrap(),
        100
    );
    let settled = |ids: &[String]| {
        let store = store.clone();
        let ids = ids.to_vec();
        async move {
            store
                .find_payments(&ids)
                .await
                .unwrap()
                .iter()
                .filter(|p| p.status == PaymentStatus::Settled)
                .count()
        }
    };
    // The oldest hundred, in both slices.
    assert_eq!(settled(&pays[..100]).await, 100);
    assert_eq!(settled(&pays[100..]).await, 0);
    assert_eq!(
        store
            .settle_due(settle_by, now_micros(), 200)
            .await
            .unwrap(),
        50
    );
    assert_eq!(settled(&pays).await, 150);
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 150 * 400);
    assert_audit_ok(store.as_ref()).await;
}

async fn a_refresh_token_rotates_once_for_its_own_client_while_live(backend: Backend) {
    use tally::store::{NewGrant, NewToken, RefreshUse, TokenKind};
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let owner = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    for client_id in ["mine", "theirs"] {
        store
            .insert_app(&NewApp {
                client_id: client_id.to_owned(),
                secret_digest: "digest".to_owned(),
                name: client_id.to_owned(),
                description: String::new(),
                redirect_url: None,
                site_url: None,
                owner_id: owner.id.clone(),
                created_at: now_micros(),
            })
            .await
            .unwrap();
    }
    let now = now_micros();
    let token = |digest: &str, kind, expires_at| NewToken {
        digest: digest.to_owned(),
        kind,
        scopes: None,
        created_at: now,
        expires_at,
    };
    let grant = |id: &str| NewGrant {
        id: id.to_owned(),
        user_id: owner.id.clone(),
        client_id: Some("mine".to_owned()),
        scopes: "access_profile make_payments".to_owned(),
        flow: "code",
        created_at: now,
    };
    let live = now + 3_600_000_000;
    store
        .insert_grant_with_tokens(&grant("g1"), &[token("r1", TokenKind::Refresh, live)])
        .await
        .unwrap();
    store
        .insert_grant_with_tokens(&grant("g2"), &[token("dead", TokenKind::Refresh, now - 1)])
        .await
        .unwrap();
    // A narrower access token, as a refresh that asked for less gets.
    let successors = [
        NewToken {
            scopes: Some("access_profile".to_owned()),
            ..token("a2", TokenKind::Access, live)
        },
        token("r2", TokenKind::Refresh, live),
    ];
    // Another client's, expired, or unknown: refused, and nothing is written.
    for (digest, client) in [("r1", "theirs"), ("dead", "mine"), ("nope", "mine")] {
        let outcome = store
            .rotate_refresh_token(presented(digest, client, now), &successors)
            .await
            .unwrap();
        assert!(
            matches!(outcome, RefreshUse::Invalid),
            "{digest}: {outcome:?}"
        );
        assert!(store.find_token("a2").await.unwrap().is_none());
    }
    let outcome = store
        .rotate_refresh_token(presented("r1", "mine", now), &successors)
        .await
        .unwrap();
    let RefreshUse::Rotated(rotated) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(rotated.grant_id, "g1");
    assert_eq!(rotated.user.id, owner.id);
    assert_eq!(rotated.user.username, owner.username);
    for (digest, kind, scopes) in [
        ("a2", "access", "access_profile"),
        ("r2", "refresh", "access_profile make_payments"),
    ] {
        let record = store.find_token(digest).await.unwrap().unwrap();
        assert_eq!(
            (
                record.grant_id.as_str(),
                record.token_kind.as_str(),
                record.scopes.as_str()
            ),
            ("g1", kind, scopes)
        );
        assert!(!record.revoked);
    }
    // Spent: a second use revokes the whole family, successors included.
    let again = [token("a3", TokenKind::Access, live)];
    let outcome = store
        .rotate_refresh_token(presented("r1", "mine", now), &again)
        .await
        .unwrap();
    assert!(matches!(outcome, RefreshUse::Replayed), "{outcome:?}");
    assert!(store.find_token("a3").await.unwrap().is_none());
    assert!(store.find_token("r2").await.unwrap().unwrap().revoked);
}

/// A pay (or charge) of 4.00 from `actor`, made through the ledger.
async fn the_audit_reads_payments_in_chunks_and_misses_nothing_at_their_edges(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let mut ann = new_user("ann", None, None);
    ann.verified = true;
    let ann = store.insert_user(&ann).await.unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    ledger::deposit(store.as_ref(), &ann.id, Amount::parse("100").unwrap())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let made = pay_four(
            store.as_ref(),
            &ann,
            ledger::payments::TargetAddress::UserId(bob.id.clone()),
        )
        .await;
        ids.push(made.payment.id);
    }
    run_workers_once(store.as_ref()).await;
    ids.sort();
    let whole = ledger::audit::run(store.as_ref()).await.unwrap();
    assert!(whole.ok, "{:?}", whole.discrepancies);
    for chunk in [1, 2, 3, 5] {
        let report = ledger::audit::run_in_chunks(store.as_ref(), chunk)
            .await
            .unwrap();
        assert!(report.ok, "chunk {chunk}: {:?}", report.discrepancies);
        assert_eq!(report.accounts, 2);
        assert_eq!(report.total_balance, whole.total_balance);
    }
    // Entries naming no payment, netting to nothing, before the first payment
    // id, between two, and after the last; and one payment of the middle
    // chunk that moved less than it says.
    let orphans = [
        "0".to_owned(),
        format!("{}0", ids[1]),
        format!("{}0", ids[3]),
        "~".to_owned(),
    ];
    for (i, orphan) in orphans.iter().enumerate() {
        tamper(
            &db,
            &format!(
                "INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, \
                 payment_id, created_at) VALUES ('m{i}', 'settle', '{0}', 5, '{orphan}', 1), \
                 ('m{i}', 'settle', '{0}', -5, '{orphan}', 1)",
                bob.id
            ),
        )
        .await;
    }
    tamper(
        &db,
        &format!(
            "UPDATE payments SET amount_cents = 300 WHERE id = '{}'",
            ids[2]
        ),
    )
    .await;
    let whole = ledger::audit::run(store.as_ref()).await.unwrap();
    let mut expected_orphans = orphans.to_vec();
    expected_orphans.sort();
    use ledger::audit::Discrepancy;
    let found_orphans: Vec<&String> = whole
        .discrepancies
        .iter()
        .filter_map(|d| match d {
            Discrepancy::EntriesWithoutPayment { payment } => Some(payment),
            _ => None,
        })
        .collect();
    assert_eq!(
        found_orphans,
        expected_orphans.iter().collect::<Vec<_>>(),
        "{:?}",
        whole.discrepancies
    );
    assert!(matches!(
        &whole.discrepancies[..],
        [Discrepancy::PaymentMismatch { payment, .. }, ..] if *payment == ids[2]
    ));
    assert_eq!(whole.discrepancies.len(), 1 + orphans.len());
    for chunk in [1, 2, 3, 5] {
        let report = ledger::audit::run_in_chunks(store.as_ref(), chunk)
            .await
            .unwrap();
        assert_eq!(report.discrepancies, whole.discrepancies, "chunk {chunk}");
    }
}

/// Pays that come at once are written together (on PostgreSQL one statement
/// for many, see `pay_batcher.rs`), and each is still all or nothing: a pay
/// not covered or to no one writes nothing, and one actor's two pays are
/// decided one after the other.
async fn pays_made_at_once_each_move_their_own_money_or_none(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let mut users = Vec::new();
    for i in 0..20 {
        let user = store
            .insert_user(&new_user(&format!("user{i}"), None, None))
            .await
            .unwrap();
        ledger::deposit(store.as_ref(), &user.id, Amount::parse("10").unwrap())
            .await
            .unwrap();
        users.push(user);
    }
    let (payers, payees) = users.split_at(10);
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    // (actor, target, amount): eight pays of 9.00 that fit, one actor's two
    // pays of 6.00 of which one fits, 11.00 from 10.00, a pay to no account
    // and one to an address no account has.
    let mut attempts = Vec::new();
    for (payer, payee) in payers.iter().zip(payees).take(6) {
        attempts.push((payer, to(payee), "9"));
    }
    attempts.push((&payers[6], to(&payees[6]), "6"));
    attempts.push((&payers[6], to(&payees[7]), "6"));
    attempts.push((&payers[7], to(&payees[7]), "11"));
    attempts.push((
        &payers[8],
        ledger::payments::TargetAddress::UserId(tally::domain::new_id()),
        "1",
    ));
    let nobody = tally::domain::Email::parse("nobody@example.com").unwrap();
    attempts.push((
        &payers[9],
        ledger::payments::TargetAddress::Email(nobody),
        "2",
    ));
    let made = futures_util::future::join_all(attempts.iter().map(|(actor, target, amount)| {
        let request = ledger::payments::PaymentRequest {
            target: target.clone(),
            amount: Amount::parse(amount).unwrap(),
            note: tally::domain::Note::parse("at once").unwrap(),
            audience: tally::domain::Audience::Private,
            medium: tally::domain::Medium::Api,
            origin: None,
        };
        ledger::payments::create(store.as_ref(), actor, request, None, LATER, now_micros())
    }))
    .await;
    use ledger::payments::CreateError;
    let mut created = Vec::new();
    for (made, (actor, _, amount)) in made.iter().zip(&attempts).take(6) {
        let made = made.as_ref().unwrap();
        assert_eq!(
            made.actor_balance.cents(),
            100,
            "{amount} from {}",
            actor.username
        );
        created.push(made.payment.id.clone());
    }
    let twice = [&made[6], &made[7]];
    let fitted: Vec<_> = twice.iter().filter_map(|m| m.as_ref().ok()).collect();
    assert_eq!(fitted.len(), 1, "{twice:?}");
    assert_eq!(fitted[0].actor_balance.cents(), 400);
    created.push(fitted[0].payment.id.clone());
    assert!(twice
        .iter()
        .any(|m| matches!(m, Err(CreateError::InsufficientFunds))));
    assert!(
        matches!(made[8], Err(CreateError::InsufficientFunds)),
        "{:?}",
        made[8]
    );
    assert!(
        matches!(made[9], Err(CreateError::InvalidTarget(_))),
        "{:?}",
        made[9]
    );
    let to_address = made[10].as_ref().unwrap();
    assert_eq!(to_address.actor_balance.cents(), 800);
    assert_eq!(to_address.payment.target_user_id, None);
    created.push(to_address.payment.id.clone());
    // Nothing of the refused pays was written: each balance is its deposit
    // less what its accepted pays hold, and the ledger agrees.
    for (i, payer) in payers.iter().enumerate() {
        let expected = match i {
            0..=5 => 100,
            6 => 400,
            7 | 8 => 1000,
            _ => 800,
        };
        let user = store
            .find_user(UserKey::Id(&payer.id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(user.balance_cents, expected, "{}", payer.username);
    }
    assert_eq!(
        store.find_payments(&created).await.unwrap().len(),
        created.len()
    );
    assert_audit_ok(store.as_ref()).await;
    if let tally::config::DatabaseUrl::Postgres(url) = &db.url {
        // Rows one transaction wrote share its id (xmin): pays that waited
        // for the ones before them went in together.
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        let transactions: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT xmin::text) FROM payments WHERE id = ANY($1)",
        )
        .bind(&created)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert!(
            transactions < i64::try_from(created.len()).unwrap(),
            "{} pays in {transactions} transactions",
            created.len()
        );
    }
}

/// A pay that fails for a reason of its own (here a payment id that is
/// taken) fails alone: the pays written with it are still written.
async fn a_pay_that_fails_its_batch_fails_alone(backend: Backend) {
    let Some((_db, store)) = store_for(backend).await else {
        return;
    };
    let mut users = Vec::new();
    for i in 0..12 {
        let user = store
            .insert_user(&new_user(&format!("user{i}"), None, None))
            .await
            .unwrap();
        ledger::deposit(store.as_ref(), &user.id, Amount::parse("10").unwrap())
            .await
            .unwrap();
        users.push(user);
    }
    let (payers, payees) = users.split_at(6);
    let taken = pay_four(
        store.as_ref(),
        &payers[0],
        ledger::payments::TargetAddress::UserId(payees[0].id.clone()),
    )
    .await
    .payment
    .id;
    let inserts: Vec<tally::store::PaymentInsert> = payers
        .iter()
        .zip(payees)
        .enumerate()
        .map(|(i, (payer, payee))| {
            let now = now_micros();
            let id = match i {
                3 => taken.clone(),
                _ => tally::domain::new_id(),
            };
            tally::store::PaymentInsert {
                payment: tally::store::Payment {
                    id,
                    kind: tally::domain::PaymentKind::Payment,
                    actor_id: Some(payer.id.clone()),
                    target_type: tally::domain::TargetType::User,
                    target_user_id: Some(payee.id.clone()),
                    target_email: None,
                    target_phone: None,
                    action: tally::domain::PaymentAction::Pay,
                    amount_cents: 100,
                    note: "x".to_owned(),
                    audience: tally::domain::Audience::Private,
                    status: PaymentStatus::Pending,
                    medium: tally::domain::Medium::Api,
                    date_created: now,
                    date_completed: None,
                    reached_account_at: Some(now),
                    refund_payment_id: None,
                },
                hold: Some(tally::store::Movement {
                    id: tally::domain::new_id(),
                    kind: EntryKind::Hold,
                    from: payer.id.clone(),
                    to: tally::store::accounts::HELD.to_owned(),
                    cents: 100,
                    at: now,
                }),
                idempotency: None,
                check_target: true,
                settle_at_once: None,
                origin: None,
            }
        })
        .collect();
    let outcomes =
        futures_util::future::join_all(inserts.iter().map(|insert| store.insert_payment(insert)))
            .await;
    for (i, outcome) in outcomes.iter().enumerate() {
        match i {
            3 => assert!(
                matches!(outcome, Err(StoreError::Conflict(_))),
                "{outcome:?}"
            ),
            _ => assert!(
                matches!(
                    outcome,
                    Ok(tally::store::InsertOutcome::Created { actor_balance_cents, .. })
                        if *actor_balance_cents == if i == 0 { 500 } else { 900 }
                ),
                "{i}: {outcome:?}"
            ),
        }
    }
    let payer = store
        .find_user(UserKey::Id(&payers[3].id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payer.balance_cents, 1000);
    assert_audit_ok(store.as_ref()).await;
}

/// Each way a payment settles writes the same ledger rows: a pay due the
/// moment it is made (settled with its own write on PostgreSQL, `pay_batch`; by
/// the next round on SQLite), a pay settled by the workers' round
/// (`settle_due`), one settled by a settlement batch (`settle_batch`), and a
/// charge approved. Each payment's rows are read back whole: its movements,
/// their kinds, accounts, amounts and times.
async fn every_way_a_payment_settles_writes_the_ledger_rows_the_audit_expects(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob, cy) = (&users[0], &users[1], &users[2]);
    ledger::deposit(store.as_ref(), &cy.id, Amount::parse("10").unwrap())
        .await
        .unwrap();
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    let request = |target, amount| ledger::payments::PaymentRequest {
        target,
        amount: Amount::parse(amount).unwrap(),
        note: tally::domain::Note::parse("x").unwrap(),
        audience: tally::domain::Audience::Private,
        medium: tally::domain::Medium::Api,
        origin: None,
    };
    let due_now = std::time::Duration::ZERO;
    let at_once = ledger::payments::create(
        store.as_ref(),
        ann,
        request(to(bob), "4"),
        None,
        due_now,
        now_micros(),
    )
    .await
    .unwrap()
    .payment;
    let status = store
        .find_payments(std::slice::from_ref(&at_once.id))
        .await
        .unwrap()[0]
        .status;
    let settled_with_its_write = backend == Backend::Postgres;
    assert_eq!(
        status == PaymentStatus::Settled,
        settled_with_its_write,
        "{status:?}"
    );
    let by_round = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let by_batch = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let charge = ledger::payments::create(
        store.as_ref(),
        ann,
        request(to(cy), "-3"),
        None,
        LATER,
        now_micros(),
    )
    .await
    .unwrap()
    .payment;
    ledger::payments::update(
        store.as_ref(),
        cy,
        &charge.id,
        ledger::payments::Update::Approve,
        None,
        now_micros(),
    )
    .await
    .unwrap();
    let batch = [tally::store::Settlement {
        payment_id: by_batch.id.clone(),
        movement_id: tally::domain::new_id(),
    }];
    assert_eq!(
        store.settle_payments(&batch, now_micros()).await.unwrap(),
        vec![by_batch.id.clone()]
    );
    run_workers_once(store.as_ref()).await;

    let ids = [&at_once, &by_round, &by_batch, &charge].map(|p| p.id.clone());
    let payments = store.find_payments(&ids).await.unwrap();
    assert_eq!(payments.len(), 4);
    let mut movements = std::collections::HashSet::new();
    for payment in &payments {
        assert_eq!(payment.status, PaymentStatus::Settled, "{}", payment.id);
        let created = payment.date_created;
        let completed = payment.date_completed.unwrap();
        let (actor, target, cents) = (
            payment.actor_id.clone().unwrap(),
            payment.target_user_id.clone().unwrap(),
            payment.amount_cents,
        );
        let held = tally::store::accounts::HELD.to_owned();
        let mut expected = if payment.id == charge.id {
            vec![
                ("charge", target, -cents, completed),
                ("charge", actor, cents, completed),
            ]
        } else {
            vec![
                ("hold", actor, -cents, created),
                ("hold", held.clone(), cents, created),
                ("settle", held, -cents, completed),
                ("settle", target, cents, completed),
            ]
        };
        if payment.id == at_once.id && settled_with_its_write {
            assert_eq!(completed, created);
        }
        let rows = ledger_rows(&db, &payment.id).await;
        let mut written: Vec<(&str, String, i64, i64)> = rows
            .iter()
            .map(|r| (r.1.as_str(), r.2.clone(), r.3, r.4))
            .collect();
        expected.sort();
        written.sort();
        assert_eq!(written, expected, "{}", payment.id);
        // One movement per kind, of this payment alone.
        for kind in ["hold", "settle", "charge"] {
            let of_kind: std::collections::HashSet<&String> =
                rows.iter().filter(|r| r.1 == kind).map(|r| &r.0).collect();
            assert!(of_kind.len() <= 1, "{kind} of {}: {of_kind:?}", payment.id);
            assert!(of_kind.iter().all(|m| movements.insert((*m).clone())));
        }
    }
    assert_eq!(balance_of(store.as_ref(), &ann.id).await, 2000 - 1200 + 300);
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 800);
    assert_eq!(balance_of(store.as_ref(), &cy.id).await, 1000 + 400 - 300);
    assert_audit_ok(store.as_ref()).await;
}

/// A round that cannot be settled whole (here a trigger refuses one pay's
/// `settle` entries, so the round's write fails, and then the batch's) is
/// settled a pay at a time by the same settlement: the others settle, the
/// refused pay stays pending with its money held, and the audit finds the
/// ledger whole.
async fn a_pay_that_cannot_settle_leaves_the_others_of_its_round_settled(backend: Backend) {
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob, cy) = (&users[0], &users[1], &users[2]);
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    let first = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let refused = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let last = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    match backend {
        Backend::Sqlite => {
            tamper(
                &db,
                &format!(
                    "CREATE TRIGGER refuse_settle BEFORE INSERT ON ledger_entries \
                     WHEN NEW.kind = 'settle' AND NEW.payment_id = '{}' \
                     BEGIN SELECT RAISE(ABORT, 'refused'); END",
                    refused.id
                ),
            )
            .await
        }
        Backend::Postgres => {
            tamper(
                &db,
                &format!(
                    "CREATE FUNCTION refuse_settle() RETURNS trigger LANGUAGE plpgsql AS $$ \
                     BEGIN IF NEW.kind = 'settle' AND NEW.payment_id = '{}' THEN \
                     RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$",
                    refused.id
                ),
            )
            .await;
            tamper(
                &db,
                "CREATE TRIGGER refuse_settle BEFORE INSERT ON ledger_entries \
                 FOR EACH ROW EXECUTE FUNCTION refuse_settle()",
            )
            .await
        }
    }
    run_workers_once(store.as_ref()).await;
    let ids = [&first, &refused, &last].map(|p| p.id.clone());
    let statuses: std::collections::HashMap<String, PaymentStatus> = store
        .find_payments(&ids)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.status))
        .collect();
    assert_eq!(statuses[&first.id], PaymentStatus::Settled);
    assert_eq!(statuses[&last.id], PaymentStatus::Settled);
    assert_eq!(statuses[&refused.id], PaymentStatus::Pending);
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 800);
    assert_eq!(balance_of(store.as_ref(), &cy.id).await, 0);
    assert_eq!(balance_of(store.as_ref(), &ann.id).await, 2000 - 1200);
    assert_audit_ok(store.as_ref()).await;
}

/// Every way a pay settles writes, row for row, what the ledger's rule says
/// its steps move (`Step::Hold` when made, `Step::Settle` when settled, each
/// between its parties): SQLite's settlement writes the moves the rule gives,
/// PostgreSQL's `settle_pays` states them in SQL, and both are held to the one
/// rule here. The ways: due the moment it is made (its own write on
/// PostgreSQL, the next round on SQLite), the workers' round (`settle_due`),
/// a batch, and a batch of one (what the workers fall back to).
async fn every_settlement_writes_the_moves_of_the_ledgers_rule(backend: Backend) {
    use tally::domain::{Parties, Step};
    let Some((db, store)) = store_for(backend).await else {
        return;
    };
    let users = ann_with_twenty_bob_and_cy(store.as_ref()).await;
    let (ann, bob, cy) = (&users[0], &users[1], &users[2]);
    let to = |user: &tally::store::User| ledger::payments::TargetAddress::UserId(user.id.clone());
    let request = ledger::payments::PaymentRequest {
        target: to(bob),
        amount: Amount::parse("2.5").unwrap(),
        note: tally::domain::Note::parse("x").unwrap(),
        audience: tally::domain::Audience::Private,
        medium: tally::domain::Medium::Api,
        origin: None,
    };
    let at_once = ledger::payments::create(
        store.as_ref(),
        ann,
        request,
        None,
        std::time::Duration::ZERO,
        now_micros(),
    )
    .await
    .unwrap()
    .payment;
    let by_round = pay_four(store.as_ref(), ann, to(bob)).await.payment;
    let by_batch = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let alone = pay_four(store.as_ref(), ann, to(cy)).await.payment;
    let settlement = |p: &tally::store::Payment| tally::store::Settlement {
        payment_id: p.id.clone(),
        movement_id: tally::domain::new_id(),
    };
    let batch = [settlement(&by_batch), settlement(&by_round)];
    // The round's pay is left to the round: only the batch's settles here.
    let suspended = |suspended| UserFlags {
        verified: None,
        suspended: Some(suspended),
    };
    store
        .update_user_flags(&bob.id, suspended(true))
        .await
        .unwrap();
    assert_eq!(
        store.settle_payments(&batch, now_micros()).await.unwrap(),
        vec![by_batch.id.clone()]
    );
    store
        .update_user_flags(&bob.id, suspended(false))
        .await
        .unwrap();
    assert_eq!(
        store
            .settle_payments(&[settlement(&alone)], now_micros())
            .await
            .unwrap(),
        vec![alone.id.clone()]
    );
    run_workers_once(store.as_ref()).await;

    let ids = [&at_once, &by_round, &by_batch, &alone].map(|p| p.id.clone());
    let payments = store.find_payments(&ids).await.unwrap();
    assert_eq!(payments.len(), 4);
    for payment in &payments {
        assert_eq!(payment.status, PaymentStatus::Settled, "{}", payment.id);
        let parties = Parties {
            actor: payment.actor_id.as_deref(),
            target: payment.target_user_id.as_deref(),
        };
        let mut expected = Vec::new();
        for (step, at) in [
            (Step::Hold, payment.date_created),
            (Step::Settle, payment.date_completed.unwrap()),
        ] {
            let moved = parties.step(step, payment.amount_cents).unwrap();
            for (account, cents) in moved.entries() {
                expected.push((step.entry_kind().as_str(), account.to_owned(), cents, at));
            }
        }
        let rows = ledger_rows(&db, &payment.id).await;
        let mut written: Vec<(&str, String, i64, i64)> = rows
            .iter()
            .map(|r| (r.1.as_str(), r.2.clone(), r.3, r.4))
            .collect();
        expected.sort();
        written.sort();
        assert_eq!(written, expected, "{}", payment.id);
        let settle_movements: std::collections::HashSet<&String> = rows
            .iter()
            .filter(|r| r.1 == "settle")
            .map(|r| &r.0)
            .collect();
        assert_eq!(settle_movements.len(), 1, "{}", payment.id);
    }
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 250 + 400);
    assert_eq!(balance_of(store.as_ref(), &cy.id).await, 800);
    assert_audit_ok(store.as_ref()).await;
}

/// A payment's ledger rows: movement id, kind, account, amount, time.
async fn ledger_rows(db: &TestDb, payment_id: &str) -> Vec<(String, String, String, i64, i64)> {
    use sqlx::Connection;
    const SQL: &str = "SELECT movement_id, kind, account, amount_cents, created_at \
        FROM ledger_entries WHERE payment_id = $1";
    match &db.url {
        tally::config::DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query_as(SQL)
                .bind(payment_id)
                .fetch_all(&mut conn)
                .await
                .unwrap()
        }
        tally::config::DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query_as(SQL)
                .bind(payment_id)
                .fetch_all(&mut conn)
                .await
                .unwrap()
        }
    }
}

/// ann (holding 20.00), bob and cy, in that order.
/// The audit over the whole ledger finds nothing wrong.
async fn assert_audit_ok(store: &dyn Store) {
    let report = ledger::audit::run(store).await.unwrap();
    assert!(report.ok, "{:?}", report.discrepancies);
}

/// A user's balance as the store has it now.
async fn balance_of(store: &dyn Store, id: &str) -> i64 {
    store
        .find_user(UserKey::Id(id))
        .await
        .unwrap()
        .unwrap()
        .balance_cents
}

async fn ann_with_twenty_bob_and_cy(store: &dyn Store) -> Vec<tally::store::User> {
    let mut users = Vec::new();
    for name in ["ann", "bob", "cy"] {
        users.push(
            store
                .insert_user(&new_user(name, None, None))
                .await
                .unwrap(),
        );
    }
    ledger::deposit(store, &users[0].id, Amount::parse("20").unwrap())
        .await
        .unwrap();
    users
}

async fn pay_four(
    store: &dyn Store,
    actor: &tally::store::User,
    target: ledger::payments::TargetAddress,
) -> ledger::payments::Made {
    try_pay_four(store, actor, target).await.unwrap()
}

/// A private pay of 4.00 from `actor` (`pay_four`), with its outcome.
async fn try_pay_four(
    store: &dyn Store,
    actor: &tally::store::User,
    target: ledger::payments::TargetAddress,
) -> Result<ledger::payments::Made, ledger::payments::CreateError> {
    let request = ledger::payments::PaymentRequest {
        target,
        amount: Amount::parse("4").unwrap(),
        note: tally::domain::Note::parse("x").unwrap(),
        audience: tally::domain::Audience::Private,
        medium: tally::domain::Medium::Api,
        origin: None,
    };
    ledger::payments::create(store, actor, request, None, LATER, now_micros()).await
}

/// A worker's transition that moves a held 4.00 to `to`, decided earlier than
/// it is applied (the races these tests stage).
fn release_held(
    payment_id: &str,
    status: PaymentStatus,
    entry_kind: tally::store::EntryKind,
    to: &str,
) -> tally::store::Transition {
    tally::store::Transition {
        payment_id: payment_id.to_owned(),
        status,
        at: now_micros(),
        movement_id: tally::domain::new_id(),
        entry_kind,
        moves: vec![tally::store::Move {
            from: tally::store::accounts::HELD.to_owned(),
            to: to.to_owned(),
            cents: 400,
        }],
        refund: None,
        skip_locked: true,
        unclaimed_only: false,
        only_if_active: None,
        idempotency: None,
    }
}

/// One round of the settlement and expiry workers, settling at once.
async fn run_workers_once(store: &dyn Store) {
    ledger::payments::process_due(
        store,
        ledger::payments::Timing {
            settlement_delay: std::time::Duration::ZERO,
            unclaimed_expiry: std::time::Duration::from_secs(3600),
        },
        now_micros(),
    )
    .await
    .unwrap();
}

/// Runs raw SQL against a test database, bypassing the store.
pub async fn tamper(db: &TestDb, sql: &str) {
    use sqlx::{Connection, Executor};
    match &db.url {
        tally::config::DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            conn.execute(sql).await.unwrap();
        }
        tally::config::DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            conn.execute(sql).await.unwrap();
        }
    }
}

/// A settlement batch crediting one account for two pays, and a pay from
/// that account, both waiting on the same changed row (with a key-share lock
/// on it, as a payment's foreign key takes): both go through, neither is
/// picked as a deadlock victim. Staged step by step with held transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_and_a_pay_waiting_on_one_changed_account_both_go_through() {
    use sqlx::{Connection, Executor};
    let Some((db, store)) = store_for(Backend::Postgres).await else {
        return;
    };
    let tally::config::DatabaseUrl::Postgres(url) = &db.url else {
        unreachable!("a PostgreSQL test database");
    };
    let ann = store
        .insert_user(&new_user("ann", None, None))
        .await
        .unwrap();
    let bob = store
        .insert_user(&new_user("bob", None, None))
        .await
        .unwrap();
    for user in [&ann, &bob] {
        ledger::deposit(store.as_ref(), &user.id, Amount::parse("20").unwrap())
            .await
            .unwrap();
    }
    let to_bob = ledger::payments::TargetAddress::UserId(bob.id.clone());
    let batch: Vec<tally::store::Settlement> = [
        pay_four(store.as_ref(), &ann, to_bob.clone()).await.payment,
        pay_four(store.as_ref(), &ann, to_bob).await.payment,
    ]
    .iter()
    .map(|p| tally::store::Settlement {
        payment_id: p.id.clone(),
        movement_id: tally::domain::new_id(),
    })
    .collect();

    let mut key_share = sqlx::PgConnection::connect(url).await.unwrap();
    let mut updater = sqlx::PgConnection::connect(url).await.unwrap();
    let mut watcher = sqlx::PgConnection::connect(url).await.unwrap();
    key_share.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE")
        .bind(&bob.id)
        .execute(&mut key_share)
        .await
        .unwrap();
    updater.execute("BEGIN").await.unwrap();
    sqlx::query("UPDATE users SET about = about WHERE id = $1")
        .bind(&bob.id)
        .execute(&mut updater)
        .await
        .unwrap();

    let settlement = tokio::spawn({
        let store = store.clone();
        async move { store.settle_payments(&batch, now_micros()).await }
    });
    waiting_on_locks(&mut watcher, 1).await;
    let pay_from_bob = tokio::spawn({
        let store = store.clone();
        let (ann, bob) = (ann.clone(), bob.clone());
        async move {
            let to_ann = ledger::payments::TargetAddress::UserId(ann.id.clone());
            try_pay_four(store.as_ref(), &bob, to_ann).await
        }
    });
    waiting_on_locks(&mut watcher, 2).await;
    updater.execute("COMMIT").await.unwrap();
    // Past PostgreSQL's deadlock_timeout (1 s), so a deadlock would be found.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    key_share.execute("COMMIT").await.unwrap();

    let within = std::time::Duration::from_secs(10);
    let settled = tokio::time::timeout(within, settlement)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.expect("the settlement went through").len(), 2);
    tokio::time::timeout(within, pay_from_bob)
        .await
        .unwrap()
        .unwrap()
        .expect("the pay went through");
    assert_eq!(balance_of(store.as_ref(), &bob.id).await, 2000 + 800 - 400);
    assert_audit_ok(store.as_ref()).await;
}

/// Waits (boundedly) until `n` transactions of this database wait on a lock.
async fn waiting_on_locks(watcher: &mut sqlx::PgConnection, n: i64) {
    for _ in 0..200 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut *watcher)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{n} transactions never waited on a lock");
}
