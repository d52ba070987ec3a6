//! `restore`: the table restore of the chaos run, done as a backup restore does it.
//!
//! Every second it scans the whole table and keeps the scans of the last 30 s. When the
//! orchestrator asks (a file `<run>/restore/<n>` holding the age wanted, in ms), it deletes the
//! table, creates it again under the same name (`ensure_table`, as `lease table create` does),
//! and puts back the items of the newest scan at least that old: what a point-in-time or backup
//! restore leaves. Holders from before, and their fencing tokens, must survive it: no second
//! holder beside one from before the restore, no token issued twice or going backwards. Writes
//! no history lines; what it did goes to `<run>/restore/<n>.done` and its log.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::actor::Actor;
use crate::cli::RestoreArgs;
use crate::dynamo;

/// One item, as Scan returns it.
type Item = HashMap<String, AttributeValue>;

/// How long scans are kept.
const KEPT: Duration = Duration::from_secs(30);
/// The pause between two scans.
const SCAN_EVERY: Duration = Duration::from_secs(1);

/// Scans, and restores when asked, until the actor stops.
///
/// # Errors
/// No table or endpoint given.
pub(crate) fn run(args: &RestoreArgs, actor: &Actor) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(restorer(args, actor))
}

async fn restorer(args: &RestoreArgs, actor: &Actor) -> Result<(), String> {
    let leases = dynamo::leases(&args.dynamo, actor).await?;
    let endpoint = args
        .dynamo
        .endpoint
        .as_deref()
        .ok_or("--endpoint is required")?;
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    let table = leases.table().to_owned();
    let requests = actor.run_dir().join("restore");
    let mut scans: VecDeque<(Instant, Vec<Item>)> = VecDeque::new();
    let mut next_scan = Instant::now();
    while !actor.stopping() {
        if let Some((request, age)) = next_request(&requests) {
            let wanted = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
            let scan = scans.iter().rev().find(|(at, _)| *at <= wanted);
            let outcome = match scan {
                Some((at, items)) => {
                    let age = at.elapsed();
                    match restore(&client, &leases, &table, items).await {
                        Ok(()) => format!("restored {} items scanned {age:?} ago", items.len()),
                        Err(error) => format!("failed: {error}"),
                    }
                }
                None => "skipped: no scan old enough yet".to_owned(),
            };
            eprintln!(
                "{}: {}: {outcome}",
                actor.history.proc_id(),
                request.display()
            );
            let _ = std::fs::write(request.with_extension("done"), format!("{outcome}\n"));
            // Scans from before the restore describe another incarnation of the table.
            scans.clear();
            next_scan = Instant::now();
        }
        if Instant::now() >= next_scan {
            next_scan = Instant::now() + SCAN_EVERY;
            match scan_all(&client, &table).await {
                Ok(items) => {
                    scans.push_back((Instant::now(), items));
                    while scans.front().is_some_and(|(at, _)| at.elapsed() > KEPT) {
                        scans.pop_front();
                    }
                }
                Err(error) => eprintln!("{}: scan: {error}", actor.history.proc_id()),
            }
        }
        if !actor.pause(Duration::from_millis(100)).await {
            break;
        }
    }
    Ok(())
}

/// The oldest request not yet done: `(path, age wanted)`.
fn next_request(dir: &Path) -> Option<(PathBuf, Duration)> {
    let mut pending: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_none() && !path.with_extension("done").exists())
        .collect();
    pending.sort();
    let path = pending.into_iter().next()?;
    let age = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    Some((path, Duration::from_millis(age)))
}

/// Every item of `table` (consistent reads, all pages).
async fn scan_all(client: &Client, table: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| format!("Scan: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

/// Deletes `table`, waits until it is gone, creates it again and puts `items` back.
async fn restore(
    client: &Client,
    leases: &lease_dynamo::DynamoLeases,
    table: &str,
    items: &[Item],
) -> Result<(), String> {
    let deleted = client.delete_table().table_name(table).send().await;
    if let Err(error) = deleted {
        return Err(format!(
            "DeleteTable: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(error)
        ));
    }
    let gone_by = Instant::now() + Duration::from_secs(30);
    while client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .is_ok()
    {
        if Instant::now() > gone_by {
            return Err("the table was still there 30 s after DeleteTable".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    leases
        .ensure_table()
        .await
        .map_err(|e| format!("ensure_table: {e}"))?;
    for item in items {
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "PutItem: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })?;
    }
    Ok(())
}
