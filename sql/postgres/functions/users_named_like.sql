-- User search's walk of one trigram's index entries, as a function so that its
-- plan is fixed: the users whose username or name matches `pattern` (a LIKE
-- pattern, `\` escaping), among those the search index files under `trigram`,
-- in listing order, at most `most` of them. SQLite runs the same statement in
-- place (`store/sqlite.rs`, `USERS_NAMED_LIKE`; a test there fails when the
-- two differ).
--
-- The plan: the trigram's entries in index order, each one's user read by
-- primary key, until `most` match. As a plain statement the planner, which
-- cannot know how many of a trigram's entries the pattern matches, sometimes
-- hashed every user instead (a parallel scan of all of them), and forcing the
-- join order with a lateral subquery made it plan every search anew. Here the
-- one generic plan is made once per connection, with no hash or merge join and
-- no parallel workers to choose (decision 012).
CREATE OR REPLACE FUNCTION users_named_like(pattern text, trigram text, most bigint)
RETURNS SETOF users
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_hashjoin = off
SET enable_mergejoin = off
SET max_parallel_workers_per_gather = 0
AS $$
BEGIN
    RETURN QUERY
    SELECT u.* FROM user_search_trigrams t JOIN users u ON u.id = t.user_id
    WHERE t.trigram = users_named_like.trigram AND u.suspended = FALSE
      AND (lower(u.username) LIKE pattern ESCAPE '\'
        OR lower(u.first_name || ' ' || u.last_name) LIKE pattern ESCAPE '\')
    ORDER BY t.sort_key, t.user_id
    LIMIT most;
END
$$;
