package catalog

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/mattn/go-sqlite3"
)

// sqliteHeader opens every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

// isSQLite says whether a catalog file is a SQLite database, by its first
// bytes: anything else is handed to DuckDB, which refuses what it cannot
// read.
func isSQLite(file string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	return string(head[:n]) == sqliteHeader, nil
}

// sqliteDriver is the driver SQLite catalogs are opened with: its connect
// hook locks each connection down before any statement of ours runs.
const sqliteDriver = "fdl-catalog-sqlite3"

// sqliteMaxLength bounds any one string or blob SQLite produces (its
// default is a billion bytes): a path of a catalog is short, and a row
// crafted with a huge value is refused rather than allocated.
const sqliteMaxLength = 16 << 20

// The driver is registered as a package variable, not in an
// init: a reader starts in child.go's init, after every variable of the
// package is initialized but before later files' inits would run.
var _ = func() bool {
	sql.Register(sqliteDriver, &sqlite3.SQLiteDriver{ConnectHook: lockDownSQLite})
	return true
}()

// lockDownSQLite runs on every new connection, before the catalog's schema
// is read: no other database may be attached, no value may pass
// sqliteMaxLength, the schema's own SQL may not call functions with side
// effects (trusted_schema), and nothing may be written (query_only, on top
// of the read-only, immutable open). Extensions cannot load: the driver
// has none to load and never enables load_extension().
func lockDownSQLite(c *sqlite3.SQLiteConn) error {
	c.SetLimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
	c.SetLimit(sqlite3.SQLITE_LIMIT_LENGTH, sqliteMaxLength)
	for _, q := range []string{"PRAGMA trusted_schema=OFF", "PRAGMA query_only=ON", "PRAGMA mmap_size=0"} {
		if _, err := c.Exec(q, nil); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// Whatever the schema holds, the statements prepared on this
	// connection may only read tables, count and lower-case, and describe
	// a table's columns: a view, trigger or generated column the checks
	// below missed still cannot call anything.
	c.RegisterAuthorizer(func(op int, arg1, arg2, _ string) int {
		switch op {
		case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ:
			return sqlite3.SQLITE_OK
		case sqlite3.SQLITE_FUNCTION:
			if f := strings.ToLower(arg2); f == "count" || f == "lower" {
				return sqlite3.SQLITE_OK
			}
		case sqlite3.SQLITE_PRAGMA:
			if strings.EqualFold(arg1, "table_xinfo") {
				return sqlite3.SQLITE_OK
			}
		}
		return sqlite3.SQLITE_DENY
	})
	return nil
}

// openSQLite opens a SQLite catalog read-only and immutable (SQLite then
// takes no lock and reads no journal or WAL beside it), on one connection
// locked down by lockDownSQLite. Memory is bounded by the page cache,
// sized to the limit DuckDB catalogs have; the queries sort nothing.
func (r *reader) openSQLite(file string) error {
	u := url.URL{Scheme: "file", Path: file, RawQuery: "mode=ro&immutable=1"}
	db, err := sql.Open(sqliteDriver, u.String())
	if err != nil {
		return r.errf("opening it with SQLite: %w", err)
	}
	db.SetMaxOpenConns(1)
	r.db = db
	conn, err := db.Conn(r.ctx)
	if err != nil {
		return r.errf("opening it with SQLite: %w", err)
	}
	r.conn = conn
	// The page cache's size is per catalog (the connect hook knows no
	// limits): set with the authorizer off for that one statement.
	if err := conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		c.RegisterAuthorizer(nil)
		_, err := c.Exec(fmt.Sprintf("PRAGMA cache_size=-%d", max(r.lim.MemoryLimit>>10, 1)), nil)
		if lerr := lockDownSQLite(c); err == nil {
			err = lerr
		}
		return err
	}); err != nil {
		return r.errf("locking SQLite down: %w", err)
	}
	var n int
	if err := conn.QueryRowContext(r.ctx, "SELECT count(*) FROM main.sqlite_master").Scan(&n); err != nil {
		return r.errf("not a readable SQLite database: %w", err)
	}
	return nil
}

// isSQLiteNoMem says whether SQLite ran out of the memory it may take.
func isSQLiteNoMem(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrNomem
}

// isSQLiteTooBig says whether SQLite met a value larger than
// sqliteMaxLength.
func isSQLiteTooBig(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrTooBig
}

// checkSQLiteObjects refuses a SQLite catalog whose ducklake_* names are
// views or virtual tables (reading either runs code the file chose: a
// view's query, a virtual table's module) or that has triggers on them.
// sqlite_master describes the schema without running any of it.
func (r *reader) checkSQLiteObjects() error {
	rows, err := r.conn.QueryContext(r.ctx, "SELECT type, name, tbl_name, sql FROM main.sqlite_master")
	if err != nil {
		return r.errf("listing the catalog's objects: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ, name, table string
		var text sql.NullString // NULL for automatic indexes
		if err := rows.Scan(&typ, &name, &table, &text); err != nil {
			return r.errf("listing the catalog's objects: %w", err)
		}
		ours := func(s string) bool { return strings.HasPrefix(strings.ToLower(s), "ducklake") }
		virtual := strings.HasPrefix(strings.ToUpper(strings.Join(strings.Fields(text.String), " ")), "CREATE VIRTUAL TABLE")
		switch {
		case typ == "view" && ours(name):
			return r.errf("%s is a view, not a table: a catalog is read from base tables only, and a view would run the catalog's own SQL", quoteName(name))
		case typ == "table" && virtual && ours(name):
			return r.errf("%s is a virtual table, not a table: a catalog is read from base tables only, and a virtual table runs its module's code", quoteName(name))
		case typ == "trigger" && (ours(table) || ours(name)):
			return r.errf("trigger %s on %s: a catalog is read from base tables only, and DuckLake catalogs have no triggers", quoteName(name), quoteName(table))
		}
	}
	if err := rows.Err(); err != nil {
		return r.errf("listing the catalog's objects: %w", err)
	}
	return nil
}

// loadSQLiteColumns learns the columns of the tables this reader queries,
// as loadColumns does for DuckDB. A generated column is refused: it
// computes its value (any expression its author chose) on every read. A
// default is not run by reading, and is allowed.
func (r *reader) loadSQLiteColumns() error {
	r.cols = map[string]map[string]bool{}
	present := map[string]bool{}
	rows, err := r.conn.QueryContext(r.ctx, "SELECT lower(name) FROM main.sqlite_master WHERE type = 'table'")
	if err != nil {
		return r.errf("listing its tables: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return r.errf("listing its tables: %w", err)
		}
		present[n] = true
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return r.errf("listing its tables: %w", err)
	}
	for _, t := range tablesRead {
		if !present[t] {
			continue
		}
		if err := r.sqliteColumns(t); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) sqliteColumns(t string) error {
	rows, err := r.conn.QueryContext(r.ctx, "PRAGMA main.table_xinfo("+t+")")
	if err != nil {
		return r.errf("reading the columns of %s: %w", t, err)
	}
	defer rows.Close()
	r.cols[t] = map[string]bool{}
	for rows.Next() {
		var cid, notNull, pk, hidden int64
		var name string
		var typ, dflt sql.NullString
		if err := rows.Scan(&cid, &name, &typ, &notNull, &dflt, &pk, &hidden); err != nil {
			return r.errf("reading the columns of %s: %w", t, err)
		}
		// hidden: 1 a virtual table's hidden column, 2 and 3 generated
		// (virtual or stored) columns.
		if hidden != 0 {
			return r.errf("column %s.%s is a generated or hidden column; DuckLake catalogs have none, and a generated column runs the catalog's own SQL", t, quoteName(name))
		}
		r.cols[t][strings.ToLower(name)] = true
	}
	return rows.Err()
}
