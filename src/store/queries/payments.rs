//! Payments, their refunds and idempotency keys, deposits and the audit's
//! snapshot. Every state change is one guarded statement (`WHERE status =
//! 'pending'`) in the same transaction as the money it moves, so a payment
//! changes state exactly once however many instances race for it.

use super::{
    push_binds, Args, Backend, Db, ThisStore, CHARGE_SQL, HOLD_SQL, SKIP_LOCKED, TO_ACCOUNT_SQL,
};
use crate::store::payments::Recorded;
use crate::store::{AuditSnapshot, Movement, PaymentStore, StoreError};

impl ThisStore {
    /// Takes an Idempotency-Key for this transaction, forgetting an
    /// expired one first. False if the key is held: one atomic statement
    /// takes it, so a racing request waits for this transaction and then
    /// finds it taken.
    async fn take_idempotency_key(
        tx: &mut sqlx::Transaction<'static, Db>,
        key: &crate::store::IdempotencyKey,
    ) -> Result<bool, StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys \
             WHERE owner_id = $1 AND key = $2 AND created_at < $3",
        )
        .bind(&key.owner_id)
        .bind(&key.key)
        .bind(key.expired_before)
        .execute(&mut **tx)
        .await?;
        let taken = sqlx::query(
            "INSERT INTO idempotency_keys (owner_id, key, fingerprint, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(&key.owner_id)
        .bind(&key.key)
        .bind(&key.fingerprint)
        .bind(key.now)
        .execute(&mut **tx)
        .await?;
        Ok(taken.rows_affected() == 1)
    }

    /// Records what a key's first request changed and answered.
    async fn complete_idempotency_key(
        tx: &mut sqlx::Transaction<'static, Db>,
        key: &crate::store::IdempotencyKey,
        payment_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency_keys SET payment_id = $3 \
             WHERE owner_id = $1 AND key = $2",
        )
        .bind(&key.owner_id)
        .bind(&key.key)
        .bind(payment_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn insert_payment_row(
        tx: &mut sqlx::Transaction<'static, Db>,
        p: &crate::store::Payment,
    ) -> Result<(), StoreError> {
        const SQL: &str = concat!(
            "INSERT INTO payments (",
            crate::store::payments::payment_columns!(),
            ") VALUES (",
            crate::store::payments::payment_placeholders!(),
            ")",
        );
        Self::bind_payment(sqlx::query(SQL), p)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Binds the payment row (`payment_placeholders!`, `$1` on), as
    /// `PAYMENT_ROW` reads it.
    fn bind_payment<'q>(
        mut query: sqlx::query::Query<'q, Db, Args<'q>>,
        p: &crate::store::Payment,
    ) -> sqlx::query::Query<'q, Db, Args<'q>> {
        use crate::store::payments::{ColumnValue, PAYMENT_ROW};
        for column in &PAYMENT_ROW {
            query = match column.value {
                ColumnValue::Text(value) => query.bind(value(p)),
                ColumnValue::Int(value) => query.bind(value(p)),
            };
        }
        query
    }

    /// The statements that write `insert`: this backend's new-payment
    /// statements, or, for a target account named by id and not read
    /// (`check_target`), those that also read it.
    pub(crate) fn payment_sql(insert: &crate::store::PaymentInsert) -> &'static str {
        let (hold_sql, charge_sql) = if insert.check_target {
            TO_ACCOUNT_SQL
        } else {
            (HOLD_SQL, CHARGE_SQL)
        };
        if insert.hold.is_some() {
            hold_sql
        } else {
            charge_sql
        }
    }

    /// [`Self::payment_sql`] with every value bound: the new payment with its
    /// parties and, for a pay, the hold the ledger decided.
    pub(crate) fn payment_statements(
        insert: &crate::store::PaymentInsert,
    ) -> Result<sqlx::query::Query<'static, Db, Args<'static>>, StoreError> {
        let p = &insert.payment;
        let mut query = Self::bind_payment(sqlx::query(Self::payment_sql(insert)), p);
        if let Some(hold) = &insert.hold {
            // The statements debit the payment's actor by its amount at its
            // time; a hold of anything else is not what they write.
            if !insert.hold_is_from_actor() {
                return Err(StoreError::Unexpected(anyhow::anyhow!(
                    "a hold must move the payment's amount from its actor"
                )));
            }
            query = query
                .bind(hold.id.clone())
                .bind(hold.to.clone())
                .bind(hold.kind.as_str());
        }
        Ok(query)
    }

    /// What the payment statements' rows say; see [`Recorded`].
    pub(crate) fn recorded(
        insert: &crate::store::PaymentInsert,
        rows: &[<Db as sqlx::Database>::Row],
    ) -> Result<Recorded, StoreError> {
        // The target, when read with the write, is in the last row.
        Recorded::from_last_row(
            insert,
            rows.last(),
            |row| Ok(sqlx::Row::try_get::<i64, _>(row, 0)?),
            |row| {
                let read: crate::store::RecordedToAccount = sqlx::FromRow::from_row(row)?;
                Ok((read.actor_balance_cents, read.target))
            },
        )
    }

    /// Writes a new payment inside the caller's transaction; see
    /// [`Self::payment_statements`].
    pub(crate) async fn record_payment(
        tx: &mut sqlx::Transaction<'static, Db>,
        insert: &crate::store::PaymentInsert,
    ) -> Result<Recorded, StoreError> {
        // Every row, so that each of SQLite's statements runs.
        let rows = Self::payment_statements(insert)?
            .fetch_all(&mut **tx)
            .await?;
        Self::recorded(insert, &rows)
    }

    async fn payment_in(
        tx: &mut sqlx::Transaction<'static, Db>,
        id: &str,
    ) -> Result<crate::store::Payment, StoreError> {
        const SQL: &str = concat!(
            "SELECT ",
            crate::store::payments::payment_columns!(),
            " FROM payments WHERE id = $1",
        );
        Ok(sqlx::query_as::<_, crate::store::Payment>(SQL)
            .bind(id)
            .fetch_one(&mut **tx)
            .await?)
    }

    /// A move's two ledger entries, of the payment `payment_id` (none for a
    /// deposit).
    async fn ledger_move(
        tx: &mut sqlx::Transaction<'static, Db>,
        movement_id: &str,
        kind: crate::store::EntryKind,
        payment_id: Option<&str>,
        at: i64,
        m: &crate::store::Move,
    ) -> Result<(), StoreError> {
        let [(from, out), (to, into)] = m.entries();
        sqlx::query(
            "INSERT INTO ledger_entries \
             (movement_id, kind, account, amount_cents, payment_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6), ($1, $2, $7, $8, $5, $6)",
        )
        .bind(movement_id)
        .bind(kind.as_str())
        .bind(from)
        .bind(out)
        .bind(payment_id)
        .bind(at)
        .bind(to)
        .bind(into)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Applies net balance changes in user-id order, so concurrent
    /// transactions lock user rows in one order and cannot deadlock.
    /// Returns false if a debit is not covered.
    async fn apply_balances(
        tx: &mut sqlx::Transaction<'static, Db>,
        moves: &[crate::store::Move],
    ) -> Result<bool, StoreError> {
        let mut net: std::collections::BTreeMap<&str, i64> = Default::default();
        for (account, cents) in moves.iter().flat_map(crate::store::Move::entries) {
            *net.entry(account).or_default() += cents;
        }
        for (account, delta) in net {
            if crate::domain::accounts::is_system(account) || delta == 0 {
                continue;
            }
            let done = sqlx::query(
                "UPDATE users SET balance_cents = balance_cents + $1 \
                 WHERE id = $2 AND balance_cents + $1 >= 0",
            )
            .bind(delta)
            .bind(account)
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl PaymentStore for ThisStore {
    #[tracing::instrument(skip_all, fields(payment_id = %insert.payment.id))]
    async fn insert_payment(
        &self,
        insert: &crate::store::PaymentInsert,
    ) -> Result<crate::store::InsertOutcome, StoreError> {
        use crate::store::InsertOutcome;
        let p = &insert.payment;
        p.actor_id.as_deref().ok_or(StoreError::NotFound("actor"))?;
        if insert.check_target && p.target_user_id.is_none() {
            return Err(StoreError::NotFound("target"));
        }
        let outcome = |recorded: Recorded| match recorded {
            Recorded::NoSuchTarget => InsertOutcome::NoSuchTarget,
            Recorded::Written {
                actor_balance_cents: None,
                ..
            } => InsertOutcome::InsufficientFunds,
            Recorded::Written {
                actor_balance_cents: Some(balance),
                target,
            } => InsertOutcome::Created {
                payment: p.clone(),
                actor_balance_cents: balance,
                target,
            },
        };
        let Some(key) = &insert.idempotency else {
            return Ok(outcome(self.record_pay(insert).await?));
        };
        let mut tx = self.write().await?;
        if !Self::take_idempotency_key(&mut tx, key).await? {
            let (fingerprint, payment_id, balance): (String, Option<String>, Option<i64>) =
                sqlx::query_as(
                    "SELECT fingerprint, payment_id, balance_cents \
                     FROM idempotency_keys WHERE owner_id = $1 AND key = $2",
                )
                .bind(&key.owner_id)
                .bind(&key.key)
                .fetch_one(&mut *tx)
                .await?;
            let outcome = match payment_id {
                Some(id) if fingerprint == key.fingerprint => InsertOutcome::Replayed {
                    payment: Self::payment_in(&mut tx, &id).await?,
                    actor_balance_cents: balance.unwrap_or(0),
                },
                _ => InsertOutcome::KeyConflict,
            };
            tx.commit().await?;
            return Ok(outcome);
        }
        let recorded = Self::record_payment(&mut tx, insert).await?;
        let Recorded::Written {
            actor_balance_cents: Some(balance),
            ..
        } = recorded
        else {
            // Nothing was written. Rolled back now, not when the connection
            // is next used: the key and the row locks go at once.
            tx.rollback().await?;
            return Ok(outcome(recorded));
        };
        Self::created_event(&mut tx, insert).await?;
        sqlx::query(
            "UPDATE idempotency_keys SET payment_id = $3, balance_cents = $4 \
             WHERE owner_id = $1 AND key = $2",
        )
        .bind(&key.owner_id)
        .bind(&key.key)
        .bind(&p.id)
        .bind(balance)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(outcome(recorded))
    }

    #[tracing::instrument(skip_all, fields(payment_id = %t.payment_id, status = t.status.as_str()))]
    async fn apply_transition(
        &self,
        t: &crate::store::Transition,
    ) -> Result<crate::store::TransitionOutcome, StoreError> {
        use crate::store::TransitionOutcome;
        let mut tx = self.write().await?;
        if let Some(key) = &t.idempotency {
            if !Self::take_idempotency_key(&mut tx, key).await? {
                tx.rollback().await?;
                return Ok(TransitionOutcome::KeyTaken);
            }
        }
        if t.skip_locked {
            static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                format!("SELECT id FROM payments WHERE id = $1 AND status = 'pending'{SKIP_LOCKED}")
            });
            let free: Option<String> = sqlx::query_scalar(&SQL)
                .bind(&t.payment_id)
                .fetch_optional(&mut *tx)
                .await?;
            if free.is_none() {
                tx.rollback().await?;
                return Ok(TransitionOutcome::NotPending);
            }
        }
        // The refund row exists before the payment points at it; if the
        // guarded update below finds the payment settled, all rolls back.
        if let Some(refund) = &t.refund {
            Self::insert_payment_row(&mut tx, refund).await?;
        }
        let sql = format!(
            "UPDATE payments SET status = $2, date_completed = $3, \
             refund_payment_id = $4 WHERE id = $1 AND status = 'pending'{}{}",
            if t.unclaimed_only {
                " AND target_user_id IS NULL"
            } else {
                ""
            },
            if t.only_if_active.is_some() {
                " AND EXISTS (SELECT 1 FROM users WHERE id = $5 AND NOT suspended)"
            } else {
                ""
            }
        );
        let mut update = sqlx::query(&sql)
            .bind(&t.payment_id)
            .bind(t.status.as_str())
            .bind(t.at)
            .bind(t.refund.as_ref().map(|r| r.id.clone()));
        if let Some(user_id) = &t.only_if_active {
            update = update.bind(user_id);
        }
        let changed = update.execute(&mut *tx).await?;
        // Early answers roll back at once (a dropped transaction would
        // keep its row locks until its connection is next used).
        if changed.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(TransitionOutcome::NotPending);
        }
        if !Self::apply_balances(&mut tx, &t.moves).await? {
            tx.rollback().await?;
            return Ok(TransitionOutcome::InsufficientFunds);
        }
        for m in &t.moves {
            Self::ledger_move(
                &mut tx,
                &t.movement_id,
                t.entry_kind,
                Some(&t.payment_id),
                t.at,
                m,
            )
            .await?;
        }
        // The event, in the change's transaction: committed with it or not at all.
        if let Some(kind) = crate::domain::EventType::of_status(t.status) {
            Self::payment_events(&mut tx, &t.payment_id, kind, t.at, None).await?;
        }
        let payment = Self::payment_in(&mut tx, &t.payment_id).await?;
        if let Some(key) = &t.idempotency {
            Self::complete_idempotency_key(&mut tx, key, &t.payment_id).await?;
        }
        tx.commit().await?;
        Ok(TransitionOutcome::Applied {
            payment: Box::new(payment),
            refund: t.refund.clone().map(Box::new),
        })
    }

    #[tracing::instrument(skip_all, fields(count = settlements.len()))]
    async fn settle_payments(
        &self,
        settlements: &[crate::store::Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        self.settle_in_batch(settlements, at).await
    }

    #[tracing::instrument(skip_all)]
    async fn settle_due(&self, settle_by: i64, at: i64, limit: i64) -> Result<usize, StoreError> {
        self.settle_due_in_batch(settle_by, at, limit).await
    }

    #[tracing::instrument(skip_all, fields(count = ids.len()))]
    async fn find_payments(
        &self,
        ids: &[String],
    ) -> Result<Vec<crate::store::Payment>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        const SQL: &str = concat!(
            "SELECT ",
            crate::store::payments::payment_columns!(),
            " FROM payments WHERE id IN (",
        );
        self.fetch_in(SQL.to_owned(), ids).await
    }

    async fn find_idempotency_key(
        &self,
        key: &crate::store::IdempotencyKey,
    ) -> Result<Option<crate::store::StoredIdempotencyKey>, StoreError> {
        self.read_optional(
            sqlx::query_as(
                "SELECT fingerprint, payment_id, balance_cents FROM idempotency_keys \
             WHERE owner_id = $1 AND key = $2 AND created_at >= $3",
            )
            .bind(&key.owner_id)
            .bind(&key.key)
            .bind(key.expired_before),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn list_payments(
        &self,
        f: &crate::store::PaymentFilter,
    ) -> Result<Vec<crate::store::Payment>, StoreError> {
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {} FROM payment_parties pp JOIN payments p ON p.id = pp.payment_id \
                 WHERE pp.user_id = ",
                crate::store::payments::payment_columns_of("p")
            )
        });
        let mut query = sqlx::QueryBuilder::<Db>::new(SQL.as_str());
        query.push_bind(f.owner_id.clone());
        if let Some(after) = f.after {
            query.push(" AND pp.date_created > ").push_bind(after);
        }
        match &f.before {
            // A row comparison, so both databases walk the primary key
            // (user_id, date_created, payment_id) straight to the spot.
            Some((at, Some(id))) => {
                query
                    .push(" AND (pp.date_created, pp.payment_id) < (")
                    .push_bind(*at)
                    .push(", ")
                    .push_bind(id.clone())
                    .push(")");
            }
            Some((at, None)) => {
                query.push(" AND pp.date_created < ").push_bind(*at);
            }
            None => {}
        }
        if let Some(action) = f.action {
            query.push(" AND p.action = ").push_bind(action.as_str());
        }
        if !f.actor_ids.is_empty() {
            query.push(" AND p.actor_id IN (");
            push_binds(&mut query, f.actor_ids.iter().cloned());
            query.push(")");
        }
        if !f.statuses.is_empty() {
            query.push(" AND p.status IN (");
            push_binds(&mut query, f.statuses.iter().map(|status| status.as_str()));
            query.push(")");
        }
        query
            .push(" ORDER BY pp.date_created DESC, pp.payment_id DESC LIMIT ")
            .push_bind(f.limit);
        Ok(query
            .build_query_as::<crate::store::Payment>()
            .fetch_all(&mut *self.lease().await?)
            .await?)
    }

    #[tracing::instrument(skip_all)]
    async fn due_payments(
        &self,
        settle_by: i64,
        expire_by: i64,
        limit: i64,
    ) -> Result<Vec<crate::store::DuePayment>, StoreError> {
        // `date_completed IS NULL` says again what `pending` says: it is the
        // predicate of PostgreSQL's index of open payments (see its migration
        // `open_payments_index`), which only this query names.
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {}, u.suspended AS target_suspended FROM payments p \
                 LEFT JOIN users u ON u.id = p.target_user_id \
                 WHERE p.date_completed IS NULL AND p.status = 'pending' AND ( \
                   (p.action = 'pay' AND p.target_user_id IS NOT NULL \
                     AND p.reached_account_at <= $1) \
                   OR (p.target_user_id IS NULL AND p.date_created <= $2)) \
                 ORDER BY p.date_created LIMIT $3",
                crate::store::payments::payment_columns_of("p")
            )
        });
        self.read_all(
            sqlx::query_as::<_, crate::store::DuePayment>(&SQL)
                .bind(settle_by)
                .bind(expire_by)
                .bind(limit),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(user_id))]
    async fn claim_payments(
        &self,
        claimant: crate::store::Claimant<'_>,
        now: i64,
    ) -> Result<u64, StoreError> {
        let crate::store::Claimant {
            user_id,
            email,
            phone,
        } = claimant;
        if email.is_none() && phone.is_none() {
            return Ok(0);
        }
        let mut tx = self.write().await?;
        let claimed: Vec<(String, i64)> = sqlx::query_as(
            "UPDATE payments SET target_user_id = $1, reached_account_at = $4 \
             WHERE status = 'pending' AND kind = 'payment' AND target_user_id IS NULL \
               AND actor_id <> $1 \
               AND ((target_email IS NOT NULL AND target_email = $2) \
                 OR (target_phone IS NOT NULL AND target_phone = $3)) \
             RETURNING id, date_created",
        )
        .bind(user_id)
        .bind(email)
        .bind(phone)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        for (id, date_created) in &claimed {
            sqlx::query(
                "INSERT INTO payment_parties (user_id, date_created, payment_id) \
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(user_id)
            .bind(date_created)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(claimed.len() as u64)
    }

    #[tracing::instrument(skip_all, fields(to = %movement.to, cents = movement.cents))]
    async fn deposit(&self, movement: &Movement) -> Result<i64, StoreError> {
        let mut tx = self.write().await?;
        let balance: Option<i64> = sqlx::query_scalar(
            "UPDATE users SET balance_cents = balance_cents + $1 WHERE id = $2 \
             RETURNING balance_cents",
        )
        .bind(movement.cents)
        .bind(&movement.to)
        .fetch_optional(&mut *tx)
        .await?;
        let balance = balance.ok_or(StoreError::NotFound("user"))?;
        let deposited = crate::store::Move {
            from: movement.from.clone(),
            to: movement.to.clone(),
            cents: movement.cents,
        };
        Self::ledger_move(
            &mut tx,
            &movement.id,
            movement.kind,
            None,
            movement.at,
            &deposited,
        )
        .await?;
        tx.commit().await?;
        Ok(balance)
    }

    #[tracing::instrument(skip_all)]
    async fn audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(crate::store::AuditChunk) + Send),
    ) -> Result<AuditSnapshot, StoreError> {
        self.read_audit_snapshot(chunk, each).await
    }
}
