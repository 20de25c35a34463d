-- OpenID Connect's `updated_at` of the `profile` scope (SPEC §10): when the
-- user last changed their name on the account page (microseconds). NULL until
-- then: userinfo answers the account's `date_joined`.
ALTER TABLE users ADD COLUMN profile_updated_at BIGINT;
