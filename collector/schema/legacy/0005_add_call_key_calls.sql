-- Every call has a key of its own (CallStart.CallKey): a caller's id may be reused, by another
-- tenant or after the call ended. The tables of calls and alerts carry it beside call_id.

ALTER TABLE {{.Alter "call_starts"}}{{.OnCluster}} ADD COLUMN call_key String;
ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN call_key String;
ALTER TABLE {{.Alter "alerts"}}{{.OnCluster}} ADD COLUMN call_key String;
