-- An app an operator has made a resource server (`tally admin app set
-- CLIENT_ID --introspect-any`) may introspect tokens issued to any app; every
-- other app learns only about its own (RFC 7662 §4, RFC 9700 R36).
ALTER TABLE apps ADD COLUMN introspect_any BOOLEAN NOT NULL DEFAULT FALSE;
