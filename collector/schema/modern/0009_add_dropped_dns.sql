-- The calls' count of DNS queries the kernel dropped at their resolver socket
-- (event.Drop.DNS, mapped by hand in rows.go as the other dropped_ columns).

ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN IF NOT EXISTS dropped_dns UInt64;
