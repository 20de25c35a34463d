-- User search's walk of one trigram's index entries, as a function so that its
-- plan is fixed: the users whose username or name matches `pattern` (a LIKE
-- pattern, `\` escaping), among those the search index files under `trigram`,
-- in listing order, at most `most` of them. SQLite runs the same statement in
-- place (`store/sqlite.rs`, `USERS_NAMED_LIKE`).
--
-- The plan: the trigram's entries in index order, each one's user read by
-- primary key, until `most` match. As a plain statement the planner, which
-- cannot know how many of a trigram's entries the pattern matches, sometimes
-- hashed every user instead (a parallel scan of all of them: 145 ms at 100,000
-- users against 2 ms), and did so for a whole load test (38 searches a second
-- against 1,700) when ANALYZE's sample happened to count the trigram's
-- thousands of entries. Forcing the join order with a lateral subquery made
-- PostgreSQL plan every search anew (its custom plans look cheaper than the
-- generic one), 0.1-0.2 ms a search, more on a large database than on a small
-- one. Here the one generic plan is made once per connection, with no hash or
-- merge join and no parallel workers to choose.
CREATE FUNCTION users_named_like(pattern text, trigram text, most bigint)
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
