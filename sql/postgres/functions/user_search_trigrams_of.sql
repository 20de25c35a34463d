-- The search index's trigrams of a user (table `user_search_trigrams`, kept by
-- the trigger function `users_search_sync`): each distinct three-character
-- piece of the lower-cased username and display name ("first last").
CREATE OR REPLACE FUNCTION user_search_trigrams_of(username TEXT, first_name TEXT, last_name TEXT)
RETURNS SETOF TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT DISTINCT substr(f.v, i, 3)
    FROM unnest(ARRAY[lower(username), lower(first_name || ' ' || last_name)]) AS f(v),
         generate_series(1, length(f.v) - 2) AS i
$$;
