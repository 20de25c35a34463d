-- The webhook rows a subscribed pay writes, lighter (decision 019):
-- webhook_deliveries_endpoint goes. A delivery's id starts with its
-- endpoint's id and a slash, so an endpoint's deliveries are a range of the
-- primary key (`id >= endpoint || '/' AND id < endpoint || '0'`, the ids
-- being COLLATE "C"). A delivery row then goes into three b-trees (the heap,
-- the primary key and, while pending, the due index) instead of four.
DROP INDEX webhook_deliveries_endpoint;
