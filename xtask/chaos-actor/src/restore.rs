//! `restore`: the table restore of the chaos run, done as a backup restore does it.
//!
//! Every second it scans the whole table and keeps the scans of the last 60 s (across restores:
//! a restore from an older backup is a restore too). When the orchestrator asks (a file
//! `<run>/restore/<n>` holding the age wanted, in ms), it deletes the table, creates it again
//! under the same name (`ensure_table`, as `lease table create` does), and puts back the items
//! of the newest scan at least that old (else the oldest kept, if a second old): what a
//! point-in-time or backup restore leaves. Holders from before, and their fencing tokens, must survive it: no second
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
const KEPT: Duration = Duration::from_secs(60);
/// The youngest scan a restore uses when none is as old as asked.
const YOUNGEST: Duration = Duration::from_secs(1);
/// Attempts of each request of a restore (DynamoDB Local may be restarting).
const ATTEMPTS: u32 = 20;
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
    let leases = dynamo::leases(&args.store, actor).await?;
    let endpoint = args
        .store
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
            let scan = scans
                .iter()
                .rev()
                .find(|(at, _)| *at <= wanted)
                .or_else(|| scans.front().filter(|(at, _)| at.elapsed() >= YOUNGEST));
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

/// Deletes `table`, waits until it is gone, creates it again and puts `items` back; each
/// request tried up to [`ATTEMPTS`] times, 250 ms apart (DynamoDB Local may be restarting).
async fn restore(
    client: &Client,
    leases: &lease_dynamo::DynamoLeases,
    table: &str,
    items: &[Item],
) -> Result<(), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match client.delete_table().table_name(table).send().await {
            Ok(_) => break,
            // An earlier attempt's reply lost: the table is gone already.
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                break;
            }
            Err(error) if attempt >= ATTEMPTS => {
                return Err(format!(
                    "DeleteTable: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(error)
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    let gone_by = Instant::now() + Duration::from_secs(30);
    loop {
        match client.describe_table().table_name(table).send().await {
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                break;
            }
            _ if Instant::now() > gone_by => {
                return Err("the table was still there 30 s after DeleteTable".to_owned());
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let mut attempt = 0;
    while let Err(error) = leases.ensure_table().await {
        attempt += 1;
        if attempt >= ATTEMPTS {
            return Err(format!("ensure_table: {error}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for item in items {
        let mut attempt = 0;
        while let Err(error) = client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .send()
            .await
        {
            attempt += 1;
            if attempt >= ATTEMPTS {
                return Err(format!(
                    "PutItem: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(error)
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}
