-- An e-mail address or phone number is an account's once the account has
-- verified it. Only verified addresses are unique, so nobody can keep an
-- address from its owner by signing up with it first; an unverified copy is
-- harmless (payments and sign-in go to the verified holder).
DROP INDEX users_email_key;
DROP INDEX users_phone_key;
CREATE UNIQUE INDEX users_verified_email_key ON users (email) WHERE email_verified;
CREATE UNIQUE INDEX users_verified_phone_key ON users (phone) WHERE phone_verified;
CREATE INDEX users_email ON users (email);
CREATE INDEX users_phone ON users (phone);
