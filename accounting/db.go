package accounting

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	// The two database/sql drivers: pure Go, so cgo stays off.
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// Errors of the package; match them with errors.Is.
var (
	// ErrInvalid: a bad argument (an empty database name, an unknown
	// --by key, a period that ends before it starts).
	ErrInvalid = errors.New("accounting: invalid argument")
	// ErrUnknownJob: Audit of a job the database has no record of.
	ErrUnknownJob = errors.New("accounting: no record of job")
	// ErrSchema: the database's schema is newer than this build knows.
	ErrSchema = errors.New("accounting: database schema is newer than this berth")
)

// Engine is the kind of database.
type Engine string

// The two engines.
const (
	SQLite   Engine = "sqlite"
	Postgres Engine = "postgres"
)

// DB is an accounting database: SQLite (a file) or PostgreSQL (a URL),
// with the schema migrated to the latest version. It is safe for
// concurrent use.
type DB struct {
	sql    *sql.DB
	engine Engine
}

// Open opens the database named by dsn and migrates its schema (Migrate).
// A dsn starting with postgres:// or postgresql:// is a PostgreSQL URL
// (driver pgx); anything else is an SQLite file (a "sqlite://" or "file:"
// prefix is allowed), created when missing. Errors wrap ErrInvalid for an
// empty dsn, ErrSchema for a schema newer than this build.
func Open(ctx context.Context, dsn string) (*DB, error) {
	var (
		eng  Engine
		conn *sql.DB
		err  error
	)
	switch {
	case dsn == "":
		return nil, fmt.Errorf("%w: empty database name (want a SQLite file or a postgres:// URL)", ErrInvalid)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		eng = Postgres
		conn, err = sql.Open("pgx", dsn)
	default:
		eng = SQLite
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
		if path == "" {
			return nil, fmt.Errorf("%w: empty SQLite file name in %q", ErrInvalid, dsn)
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		conn, err = sql.Open("sqlite", "file:"+path+sep+"_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err == nil {
			conn.SetMaxOpenConns(1) // one writer; readers of another process see committed batches
		}
	}
	if err != nil {
		return nil, fmt.Errorf("accounting: open %s: %w", eng, err)
	}
	db := &DB{sql: conn, engine: eng}
	if err := db.Migrate(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return db, nil
}

// Engine says which database this is.
func (db *DB) Engine() Engine { return db.engine }

// SQL returns the underlying database handle (for queries of one's own).
func (db *DB) SQL() *sql.DB { return db.sql }

// Close closes the database.
func (db *DB) Close() error { return db.sql.Close() }

// bind rewrites the ? placeholders of q for the engine ($1, $2 ... for
// PostgreSQL). The package's queries have no ? inside literals.
func (db *DB) bind(q string) string {
	if db.engine != Postgres {
		return q
	}
	var sb strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			sb.WriteString("$" + strconv.Itoa(n))
			continue
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

// migration is one versioned schema change; its statements are written
// once, with {{id}} standing for the engine's auto-increment key.
type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations are applied in order, each in one transaction, and recorded
// in schema_migrations. Never edit one that has shipped: add the next.
var migrations = []migration{
	{1, "job steps", []string{
		`CREATE TABLE job_steps (
			id {{id}},
			job_id TEXT NOT NULL,
			kind TEXT NOT NULL,
			at_ms BIGINT NOT NULL,
			queue TEXT NOT NULL DEFAULT '',
			account TEXT NOT NULL DEFAULT '',
			user_name TEXT NOT NULL DEFAULT '',
			partitions TEXT NOT NULL DEFAULT '',
			partition_name TEXT NOT NULL DEFAULT '',
			reason TEXT NOT NULL DEFAULT '',
			nodes TEXT NOT NULL DEFAULT '',
			gpus TEXT NOT NULL DEFAULT '',
			gpu_milli BIGINT NOT NULL DEFAULT 0,
			driver TEXT NOT NULL DEFAULT '',
			image TEXT NOT NULL DEFAULT '',
			run_start_ms BIGINT NOT NULL DEFAULT 0,
			gpu_us BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX job_steps_job ON job_steps (job_id, id)`,
		`CREATE INDEX job_steps_at ON job_steps (at_ms)`,
	}},
	{2, "jobs summary", []string{
		`CREATE TABLE jobs (
			job_id TEXT PRIMARY KEY,
			queue TEXT NOT NULL DEFAULT '',
			account TEXT NOT NULL DEFAULT '',
			user_name TEXT NOT NULL DEFAULT '',
			partition_name TEXT NOT NULL DEFAULT '',
			state TEXT NOT NULL DEFAULT '',
			submit_ms BIGINT,
			first_start_ms BIGINT,
			end_ms BIGINT,
			runs INTEGER NOT NULL DEFAULT 0,
			preemptions INTEGER NOT NULL DEFAULT 0,
			requeues INTEGER NOT NULL DEFAULT 0,
			gpu_us BIGINT NOT NULL DEFAULT 0
		)`,
	}},
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// Migrate brings the schema to SchemaVersion, applying the missing
// migrations in order, each in a transaction. It is idempotent. A
// database whose schema is newer than this build is refused (ErrSchema).
func (db *DB) Migrate(ctx context.Context) error {
	if _, err := db.sql.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("accounting: %s: creating schema_migrations: %w", db.engine, err)
	}
	cur, err := db.Version(ctx)
	if err != nil {
		return err
	}
	if cur > SchemaVersion() {
		return fmt.Errorf("%w: version %d, this build knows up to %d", ErrSchema, cur, SchemaVersion())
	}
	id := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if db.engine == Postgres {
		id = "BIGSERIAL PRIMARY KEY"
	}
	for _, m := range migrations {
		if m.version <= cur {
			continue
		}
		tx, err := db.sql.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("accounting: migration %d: %w", m.version, err)
		}
		for _, s := range m.stmts {
			if _, err := tx.ExecContext(ctx, strings.ReplaceAll(s, "{{id}}", id)); err != nil {
				tx.Rollback()
				return fmt.Errorf("accounting: %s: migration %d (%s): %w", db.engine, m.version, m.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, db.bind(`INSERT INTO schema_migrations (version, name, applied_ms) VALUES (?, ?, ?)`),
			m.version, m.name, time.Now().UnixMilli()); err != nil {
			tx.Rollback()
			return fmt.Errorf("accounting: migration %d: %w", m.version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("accounting: migration %d: %w", m.version, err)
		}
	}
	return nil
}

// Version returns the schema version the database is at (0: empty).
func (db *DB) Version(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := db.sql.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("accounting: %s: reading the schema version: %w", db.engine, err)
	}
	return int(v.Int64), nil
}
