package collector

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// insertBlock is the most rows sent in one block of an insert.
//
// A batch goes to ClickHouse as one INSERT of several blocks, which the server squashes into
// one part, as it stores a batch sent as one block, and stores or refuses as a whole
// (TestInsertBlocksOnePart). The driver then reuses its column buffers block after block
// instead of growing them, copy after copy, to a whole batch: that growth was the largest
// allocation of shipping (half a gigabyte for BenchmarkShip's 300 000 events).
const insertBlock = 8192

// insert sends one INSERT with an explicit column list, in blocks of at most block rows (all
// in one when block is 0); it is acknowledged (Send returns nil) only once the server has
// stored every block.
func insert(ctx context.Context, conn driver.Conn, table string, cols []column, block int) error {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+strings.Join(names, ", ")+")")
	if err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	n := columnLen(cols[0])
	if block <= 0 {
		block = n
	}
	for from := 0; from < n; from += block {
		to := min(from+block, n)
		for i, c := range cols {
			if err := b.Column(i).Append(reflect.ValueOf(c.values).Slice(from, to).Interface()); err != nil {
				b.Abort()
				return fmt.Errorf("insert into %s: column %s: %w", table, c.name, err)
			}
		}
		if to < n {
			if err := b.Flush(); err != nil {
				b.Abort()
				return fmt.Errorf("insert into %s: %w", table, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	return nil
}

func columnLen(c column) int { return reflect.ValueOf(c.values).Len() }
