//! The SQL the catalog logic runs, on either back end: a small interface in the shape of the rusqlite API the
//! logic was first written against (`prepare_cached`, `query_row`, `query_map`, `execute`, `params!`, `Row::get`,
//! `optional`), whose connection is an embedded SQLite connection or a PostgreSQL session inside a transaction.
//! So the catalog logic (`sqlite.rs` and its modules) is written once.
//!
//! Values cross the interface as five kinds ([`Value`]: NULL, 64-bit integer, double, text, bytes), as in SQLite.
//! On PostgreSQL a parameter is encoded for the type the server inferred for it (an integer for a `BIGINT`,
//! `INTEGER` or `BOOLEAN` parameter, bytes for `BYTEA`, …) and a column is decoded by its type (`NUMERIC`, what
//! `SUM` of a `BIGINT` gives, as an integer).
//!
//! The statements are written in the SQL both accept; [`pg_sql`] makes the two mechanical changes PostgreSQL
//! needs: numbered parameters `?N` become `$N`, and the column name `offset` (a reserved word there) is quoted.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::CatalogError;

/// One value of a row or a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// Errors of a statement.
#[derive(Debug)]
pub enum Error {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
    /// `query_row` found no row.
    NoRows,
    /// A value could not be converted (a corrupt or unexpected column), with our own error inside when we made
    /// it.
    Conversion(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Sqlite(e) => write!(f, "{e}"),
            Error::Postgres(e) => match e.as_db_error() {
                Some(db) => write!(
                    f,
                    "{}: {} (SQLSTATE {})",
                    db.severity(),
                    db.message(),
                    db.code().code()
                ),
                None => write!(f, "{e}"),
            },
            Error::NoRows => f.write_str("query returned no rows"),
            Error::Conversion(e) => write!(f, "conversion failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sqlite(e) => Some(e),
            Error::Postgres(e) => Some(e),
            Error::NoRows => None,
            Error::Conversion(e) => Some(e.as_ref()),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::QueryReturnedNoRows => Error::NoRows,
            rusqlite::Error::FromSqlConversionFailure(_, _, inner) => Error::Conversion(inner),
            e => Error::Sqlite(e),
        }
    }
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Self {
        Error::Postgres(e)
    }
}

impl Error {
    /// A conversion failure carrying a catalog error (a corrupt row).
    pub fn conversion(e: CatalogError) -> Error {
        Error::Conversion(Box::new(e))
    }

    /// The SQLSTATE of a PostgreSQL error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Postgres(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// A serialization failure or a deadlock (SQLSTATE 40001, 40P01): the transaction may succeed when run
    /// again.
    pub fn is_retryable(&self) -> bool {
        matches!(self.sqlstate(), Some("40001") | Some("40P01"))
    }
}

/// Result of statements.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Option` for `query_row` results (as rusqlite's `OptionalExtension`).
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A value that can be a parameter.
pub trait ToSql {
    fn to_value(&self) -> Value;
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl<T: ToSql> ToSql for Option<T> {
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}
macro_rules! int_to_sql {
    ($($t:ty),*) => {$(
        impl ToSql for $t {
            fn to_value(&self) -> Value {
                Value::Integer(*self as i64)
            }
        }
    )*};
}
int_to_sql!(i64, i32, u32, u16, u8, i16, usize);
impl ToSql for u64 {
    fn to_value(&self) -> Value {
        Value::Integer(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}
impl ToSql for bool {
    fn to_value(&self) -> Value {
        Value::Integer(*self as i64)
    }
}
impl ToSql for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}
impl ToSql for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}
impl ToSql for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToSql for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToSql for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl<const N: usize> ToSql for [u8; N] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToSql for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

/// Parameters of a statement: `params![a, b]`.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::sql::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::sql::ToSql),+] as &[&dyn $crate::sql::ToSql]
    };
}
pub(crate) use params;

/// A value that a column can be read as.
pub trait FromSql: Sized {
    fn from_value(value: Value) -> Result<Self>;
}

fn mismatch(value: &Value, wanted: &str) -> Error {
    Error::conversion(CatalogError::Corrupt(format!(
        "column holds {value:?}, expected {wanted}"
    )))
}

impl FromSql for i64 {
    fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Integer(v) => Ok(v),
            other => Err(mismatch(&other, "an integer")),
        }
    }
}
impl FromSql for f64 {
    fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Real(v) => Ok(v),
            Value::Integer(v) => Ok(v as f64),
            other => Err(mismatch(&other, "a number")),
        }
    }
}
impl FromSql for bool {
    fn from_value(value: Value) -> Result<Self> {
        i64::from_value(value).map(|v| v != 0)
    }
}
impl FromSql for String {
    fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Text(v) => Ok(v),
            other => Err(mismatch(&other, "text")),
        }
    }
}
impl FromSql for Vec<u8> {
    fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Blob(v) => Ok(v),
            Value::Text(v) => Ok(v.into_bytes()),
            other => Err(mismatch(&other, "bytes")),
        }
    }
}
impl<T: FromSql> FromSql for Option<T> {
    fn from_value(value: Value) -> Result<Self> {
        match value {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}
impl FromSql for Value {
    fn from_value(value: Value) -> Result<Self> {
        Ok(value)
    }
}

/// A PostgreSQL session: its client and its prepared statements.
pub struct PgSession {
    pub client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

impl PgSession {
    pub fn new(client: postgres::Client) -> PgSession {
        PgSession {
            client,
            statements: HashMap::new(),
        }
    }

    fn prepare(&mut self, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let statement = self.client.prepare(&pg_sql(sql))?;
        if self.statements.len() >= 256 {
            self.statements.clear();
        }
        self.statements.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }
}

/// A connection (on PostgreSQL: a session inside its transaction). In a write body it is the transaction.
pub struct Connection<'a> {
    inner: Inner<'a>,
}

#[derive(Clone, Copy)]
enum Inner<'a> {
    Sqlite(&'a rusqlite::Connection),
    Pg(&'a RefCell<PgSession>),
}

/// A write transaction: a connection inside `BEGIN … COMMIT`.
pub type Transaction<'a> = Connection<'a>;

impl<'a> Connection<'a> {
    pub fn sqlite(conn: &'a rusqlite::Connection) -> Connection<'a> {
        Connection {
            inner: Inner::Sqlite(conn),
        }
    }

    pub fn postgres(session: &'a RefCell<PgSession>) -> Connection<'a> {
        Connection {
            inner: Inner::Pg(session),
        }
    }

    /// Prepare `sql` (cached per connection).
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'a>> {
        Ok(Statement {
            inner: match self.inner {
                Inner::Sqlite(c) => StatementInner::Sqlite(c.prepare_cached(sql)?),
                Inner::Pg(s) => {
                    let statement = s.borrow_mut().prepare(sql)?;
                    StatementInner::Pg(s, statement)
                }
            },
        })
    }

    /// Prepare `sql` (also cached).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'a>> {
        self.prepare_cached(sql)
    }

    /// Run `sql` once; the number of rows changed.
    pub fn execute(&self, sql: &str, params: &[&dyn ToSql]) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of `sql` mapped by `f`; [`Error::NoRows`] when there is none.
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// Run statements without parameters, separated by `;`.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Pg(s) => Ok(s.borrow_mut().client.batch_execute(&pg_sql(sql))?),
        }
    }
}

/// A prepared statement.
pub struct Statement<'a> {
    inner: StatementInner<'a>,
}

enum StatementInner<'a> {
    Sqlite(rusqlite::CachedStatement<'a>),
    Pg(&'a RefCell<PgSession>, postgres::Statement),
}

fn sqlite_value(v: Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::Integer(i) => rusqlite::types::Value::Integer(i),
        Value::Real(f) => rusqlite::types::Value::Real(f),
        Value::Text(s) => rusqlite::types::Value::Text(s),
        Value::Blob(b) => rusqlite::types::Value::Blob(b),
    }
}

fn sqlite_params(params: &[&dyn ToSql]) -> Vec<rusqlite::types::Value> {
    params.iter().map(|p| sqlite_value(p.to_value())).collect()
}

fn pg_params(params: &[&dyn ToSql]) -> Vec<PgParam> {
    params.iter().map(|p| PgParam(p.to_value())).collect()
}

fn pg_refs(params: &[PgParam]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|p| p as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

impl Statement<'_> {
    /// Run the statement; the number of rows changed.
    pub fn execute(&mut self, params: &[&dyn ToSql]) -> Result<usize> {
        match &mut self.inner {
            StatementInner::Sqlite(s) => {
                Ok(s.execute(rusqlite::params_from_iter(sqlite_params(params)))?)
            }
            StatementInner::Pg(session, statement) => {
                let values = pg_params(params);
                let n = session
                    .borrow_mut()
                    .client
                    .execute(statement, &pg_refs(&values))?;
                Ok(n as usize)
            }
        }
    }

    /// The first row mapped by `f`; [`Error::NoRows`] when there is none.
    pub fn query_row<T>(
        &mut self,
        params: &[&dyn ToSql],
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        match &mut self.inner {
            StatementInner::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(sqlite_params(params)))?;
                match rows.next()? {
                    Some(row) => f(&Row::Sqlite(row)),
                    None => Err(Error::NoRows),
                }
            }
            StatementInner::Pg(session, statement) => {
                let values = pg_params(params);
                let rows = session
                    .borrow_mut()
                    .client
                    .query(statement, &pg_refs(&values))?;
                match rows.first() {
                    Some(row) => f(&Row::Pg(row)),
                    None => Err(Error::NoRows),
                }
            }
        }
    }

    /// Every row mapped by `f` (read at once).
    pub fn query_map<T>(
        &mut self,
        params: &[&dyn ToSql],
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let mut out = Vec::new();
        match &mut self.inner {
            StatementInner::Sqlite(s) => {
                let mut rows = s.query(rusqlite::params_from_iter(sqlite_params(params)))?;
                while let Some(row) = rows.next()? {
                    out.push(f(&Row::Sqlite(row)));
                }
            }
            StatementInner::Pg(session, statement) => {
                let values = pg_params(params);
                let rows = session
                    .borrow_mut()
                    .client
                    .query(statement, &pg_refs(&values))?;
                for row in &rows {
                    out.push(f(&Row::Pg(row)));
                }
            }
        }
        Ok(out.into_iter())
    }
}

/// A column index (as in rusqlite, so that `row.get(0)` infers `usize`).
pub trait RowIndex {
    fn index(self) -> usize;
}
impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// One row of a result.
pub enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Pg(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `idx` (from 0) as `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        let idx = idx.index();
        let value = match self {
            Row::Sqlite(r) => match r.get_ref(idx)? {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(i) => Value::Integer(i),
                rusqlite::types::ValueRef::Real(f) => Value::Real(f),
                rusqlite::types::ValueRef::Text(t) => Value::Text(
                    String::from_utf8(t.to_vec()).map_err(|e| Error::Conversion(Box::new(e)))?,
                ),
                rusqlite::types::ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            },
            Row::Pg(r) => pg_value(r, idx)?,
        };
        T::from_value(value)
    }
}

fn pg_value(row: &postgres::Row, idx: usize) -> Result<Value> {
    use postgres::types::Type;
    let ty = row
        .columns()
        .get(idx)
        .ok_or_else(|| Error::conversion(CatalogError::Corrupt(format!("no column {idx}"))))?
        .type_()
        .clone();
    let value = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(idx)?.map(Value::Integer),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(idx)?
            .map(|v| Value::Integer(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(idx)?.map(Value::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(idx)?
            .map(|v| Value::Real(v.into())),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(idx)?.map(Value::Blob),
        Type::NUMERIC => row
            .try_get::<_, Option<PgNumeric>>(idx)?
            .map(|n| Value::Integer(n.0)),
        _ => row.try_get::<_, Option<String>>(idx)?.map(Value::Text),
    };
    Ok(value.unwrap_or(Value::Null))
}

/// An integral `NUMERIC` (what PostgreSQL's `SUM` of a `BIGINT` column is).
struct PgNumeric(i64);

impl<'a> postgres::types::FromSql<'a> for PgNumeric {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        // Binary NUMERIC: ndigits, weight, sign, dscale (16 bits each), then ndigits base-10000 digits.
        let word =
            |i: usize| -> std::result::Result<i16, Box<dyn std::error::Error + Sync + Send>> {
                raw.get(2 * i..2 * i + 2)
                    .map(|b| i16::from_be_bytes([b[0], b[1]]))
                    .ok_or_else(|| "truncated NUMERIC".into())
            };
        let ndigits = word(0)? as usize;
        let weight = word(1)? as i32;
        let sign = word(2)? as u16;
        if sign == 0xC000 {
            return Err("NUMERIC NaN".into());
        }
        let mut value: i128 = 0;
        for i in 0..ndigits {
            let power = weight - i as i32;
            if power < 0 {
                break; // a fraction: SUM of integers has none
            }
            value += i128::from(word(4 + i)?) * 10_000i128.pow(power as u32);
        }
        if sign == 0x4000 {
            value = -value;
        }
        Ok(PgNumeric(
            i64::try_from(value).map_err(|_| "NUMERIC beyond 64 bits")?,
        ))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::NUMERIC
    }
}

/// A parameter, encoded for the type PostgreSQL inferred for it.
#[derive(Debug)]
struct PgParam(Value);

impl postgres::types::ToSql for PgParam {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        use postgres::types::{IsNull, Type};
        let wrong = || -> Box<dyn std::error::Error + Sync + Send> {
            format!("cannot pass {:?} as a parameter of type {ty}", self.0).into()
        };
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => Err(wrong()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => Err(wrong()),
            },
            Value::Text(s) => match *ty {
                Type::BYTEA => s.as_bytes().to_sql(ty, out),
                _ => s.as_str().to_sql(ty, out),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.as_slice().to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => std::str::from_utf8(b)?.to_sql(ty, out),
                _ => Err(wrong()),
            },
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// `sql` as PostgreSQL takes it: `?N` → `$N`, the column `offset` quoted. Outside string literals only.
pub fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let bytes = sql.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            out.push(c as char);
            if c == b'\'' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == b'\'' {
            in_string = true;
            out.push('\'');
            i += 1;
            continue;
        }
        if c == b'"' {
            // A quoted identifier: as it is.
            let end = sql[i + 1..].find('"').map_or(sql.len(), |p| i + 2 + p);
            out.push_str(&sql[i..end]);
            i = end;
            continue;
        }
        if c == b'?' {
            out.push('$');
            i += 1;
            continue;
        }
        let word_start = c.is_ascii_alphabetic() || c == b'_';
        let after_word = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if word_start && !after_word {
            let end = bytes[i..]
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
                .map_or(bytes.len(), |p| i + p);
            let word = &sql[i..end];
            if word == "offset" {
                out.push_str("\"offset\"");
            } else {
                out.push_str(word);
            }
            i = end;
            continue;
        }
        // Multi-byte UTF-8: copy the whole character.
        let ch = sql[i..].chars().next().expect("a character");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::pg_sql;

    #[test]
    fn pg_sql_numbers_parameters_and_quotes_offset_outside_literals() {
        assert_eq!(
            pg_sql("SELECT offset, \"offset\", append_offset FROM t WHERE a = ?1 AND b = '?x offset' LIMIT ?12 OFFSET ?2"),
            "SELECT \"offset\", \"offset\", append_offset FROM t WHERE a = $1 AND b = '?x offset' LIMIT $12 OFFSET $2"
        );
    }
}
