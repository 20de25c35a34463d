-- Users found by id through a hash index as well as the primary key's b-tree
-- (decision 020). A page of payments reads its counterparties by id; a b-tree
-- gains a level as the table grows, a hash bucket does not, so that read costs
-- the same at 1,000 users as at 100,000. Balance updates leave it alone (they
-- change no indexed column, so PostgreSQL updates the row in place).
CREATE INDEX users_id_hash ON users USING hash (id);
