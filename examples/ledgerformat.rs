//! Reads, or sets, the format stamp of a pullgate ledger (`<root>/metadata.redb`, table
//! `ledger_format`): tests/e2e_upgrade.sh uses it to stand in for a pullgate newer than the one
//! under test, which must refuse the ledger and change nothing.
//!   ledgerformat FILE                    prints `FORMAT VERSION` (1 0.1.0 when unstamped)
//!   ledgerformat FILE --set N VERSION    stamps format N, last opened by pullgate VERSION
use redb::{ReadableDatabase, TableDefinition};

const FORMAT: TableDefinition<&str, &str> = TableDefinition::new("ledger_format");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [file] => {
            let db = redb::ReadOnlyDatabase::open(file)?;
            let tx = db.begin_read()?;
            let (f, v) = match tx.open_table(FORMAT) {
                Ok(t) => (t.get("format")?.map(|v| v.value().to_string()), t.get("opened_by")?.map(|v| v.value().to_string())),
                Err(redb::TableError::TableDoesNotExist(_)) => (None, None),
                Err(e) => return Err(e.into()),
            };
            println!("{} {}", f.as_deref().unwrap_or("1"), v.as_deref().unwrap_or("0.1.0"));
        }
        [file, set, n, version] if set == "--set" => {
            let n: u64 = n.parse()?;
            let db = redb::Database::create(file)?;
            let tx = db.begin_write()?;
            {
                let mut t = tx.open_table(FORMAT)?;
                t.insert("format", n.to_string().as_str())?;
                t.insert("opened_by", version.as_str())?;
            }
            tx.commit()?;
        }
        _ => return Err("usage: ledgerformat FILE [--set FORMAT VERSION]".into()),
    }
    Ok(())
}
