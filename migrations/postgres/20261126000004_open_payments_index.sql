-- The workers find due payments through a partial index of the payments
-- still open. Its predicate was `status = 'pending'`, which every guarded
-- write of a pending payment also says (`WHERE id = … AND status =
-- 'pending'`), so the planner could take that index instead of the primary
-- key. Under load that is the wrong one: a settled payment's entry stays in
-- it, dead, until autovacuum comes by (at most once a minute), and a pay
-- row of ten seconds left 50,000 dead entries beside a few hundred live
-- ones; the settlement round, driven through it, took 19 ms.
--
-- A payment is open exactly while it has no `date_completed` (every end
-- state sets it, and nothing clears it), so the index now says that. The
-- worker's query names it; the guarded writes do not, and reach their row by
-- its key.
CREATE INDEX payments_open ON payments (date_created) WHERE date_completed IS NULL;
DROP INDEX payments_pending;
