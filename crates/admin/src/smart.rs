//! SMART in the operator's view (docs/smart.md): the server's [`SmartMonitor`] reads SMART only at spin-ups the
//! power manager made for other work; here its readings are kept in the catalog (`smart_readings`), its alerts
//! become `smart` events, and what it knows of each disk becomes the `smart` object of `GET /disks`, the
//! `permafrost_disk_smart_*` metrics and the dashboard's mark on a disk. Nothing here reads a disk.

use std::sync::{Arc, Weak};

use permafrost_catalog::SmartRecord;
use permafrost_disk::smart::{
    attribute_name, system_unix_ms, DiskSmart, SmartAlert, SmartEvent, SmartHistory, SmartMonitor,
    SmartReading, SmartSettings, LOAD_CYCLE, START_STOP, WATCHED,
};
use permafrost_store::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::events::EventBus;
use crate::metrics::{counter, gauge, Labels};
use crate::tasks::Tasks;

/// Readings kept per disk in the catalog (a year of daily readings).
pub const READINGS_KEPT: u64 = 400;

/// The catalog as the monitor's history.
struct CatalogHistory {
    store: Weak<Store>,
}

impl SmartHistory for CatalogHistory {
    fn latest(&self) -> Result<Vec<(usize, SmartReading)>, String> {
        let store = self.store.upgrade().ok_or("the store is closed")?;
        // Called once when the server starts, inside its async runtime, where the PostgreSQL catalog's client
        // (which blocks on a runtime of its own) cannot run: the query runs on a plain thread.
        let rows = std::thread::scope(|s| s.spawn(|| store.catalog().smart_latest()).join())
            .map_err(|_| "the query of the latest readings panicked".to_string())?
            .map_err(|e| e.to_string())?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let reading = serde_json::from_str(&r.reading)
                    .map_err(|e| {
                        tracing::warn!(
                            "SMART: a kept reading of disk {} is not understood: {e}",
                            r.disk
                        )
                    })
                    .ok()?;
                Some((r.disk as usize, reading))
            })
            .collect())
    }

    fn record(&self, disk: usize, reading: &SmartReading) -> Result<(), String> {
        let store = self.store.upgrade().ok_or("the store is closed")?;
        let record = SmartRecord {
            disk: disk as u32,
            at_ms: reading.at_unix_ms,
            reading: serde_json::to_string(reading).map_err(|e| e.to_string())?,
        };
        store
            .catalog()
            .smart_append(&record, READINGS_KEPT)
            .map_err(|e| e.to_string())
    }
}

/// Start reading SMART of `store`'s disks at their spin-ups; alerts are published on `events`.
pub(crate) fn start(
    store: &Arc<Store>,
    events: Arc<EventBus>,
    tasks: Arc<Tasks>,
    settings: SmartSettings,
) -> SmartMonitor {
    let weak = Arc::downgrade(store);
    let names = {
        let store = weak.clone();
        Box::new(move |disk: usize| {
            let store = store.upgrade()?;
            let status = store.engine().status().ok()?;
            let d = status.disks.into_iter().find(|d| d.index == disk)?;
            (!d.failed).then_some(d.name)
        })
    };
    let evacuate_when_failing = settings.evacuate_when_failing;
    let monitor = SmartMonitor::start(
        settings,
        store.engine().power(),
        names,
        Arc::new(CatalogHistory {
            store: weak.clone(),
        }),
        Box::new(system_unix_ms),
    );
    let store = weak;
    monitor.set_listener(Box::new(move |e: &SmartEvent| {
        if e.alerts.is_empty() {
            return;
        }
        let said: Vec<String> = e.alerts.iter().map(|a| a.to_string()).collect();
        if evacuate_when_failing && e.alerts.iter().any(SmartAlert::is_failing) {
            if let Some(store) = store.upgrade() {
                evacuate_failing(&tasks, &store, &events, e.disk, &said.join("; "));
            }
        }
        events.emit(
            "smart",
            format!("disk {} SMART: {}", e.disk, said.join("; ")),
            serde_json::json!({
                "disk": e.disk,
                "name": e.name,
                "alerts": e.alerts,
                "attributes": e.reading.attributes,
                "serial": e.reading.serial,
            }),
        );
    }));
    monitor
}

/// `[smart] evacuate_when_failing`: start the evacuation of `disk`, whose SMART says it is failing (`said`), unless
/// it is under way already; a refusal is an event that says why.
fn evacuate_failing(
    tasks: &Tasks,
    store: &Arc<Store>,
    events: &Arc<EventBus>,
    disk: usize,
    said: &str,
) {
    let file_backed = matches!(
        store.engine().config().disks.get(disk),
        Some(permafrost_engine::DiskSpec::File { .. })
    );
    let refused = if !file_backed {
        Some(format!(
            "disk {disk} is a block device: name its replacement (permafrost grid evacuate --disk {disk} --to DEVICE)"
        ))
    } else {
        let why = format!(" because its SMART says it is failing ({said})");
        crate::evacuate::start_evacuation(tasks, store, events, disk, None, &why)
            .err()
            .map(|e| e.to_string())
    };
    if let Some(reason) = refused {
        // Already being evacuated is the expected refusal of a second alert: nothing to say.
        if !reason.contains("already being evacuated") {
            events.emit(
                "smart",
                format!("disk {disk} is failing but is not evacuated automatically: {reason}"),
                serde_json::json!({ "disk": disk, "evacuation": "not started", "reason": reason }),
            );
        }
    }
}

/// The `smart` object of a disk in `GET /disks` (`None` monitor: SMART is off in the configuration).
pub(crate) fn disk_json(
    monitor: Option<&SmartMonitor>,
    disk: usize,
    name: &str,
) -> serde_json::Value {
    let file_backed = !name.starts_with("/dev/");
    let Some(monitor) = monitor else {
        return serde_json::json!({"available": false, "why": "SMART is off ([smart] enabled = false)"});
    };
    let status = monitor.status().into_iter().nth(disk).unwrap_or_default();
    let Some(last) = &status.last else {
        let why = status.last_error.clone().unwrap_or_else(|| {
            let source = if file_backed {
                "file-backed disk: its SMART file (DISK.smart.json) is"
            } else {
                "it is"
            };
            format!("not read yet: {source} read at the next spin-up made for other work, never by waking the disk")
        });
        return serde_json::json!({
            "available": false,
            "why": why,
            "skipped_off": status.skipped_off,
        });
    };
    let age_seconds = system_unix_ms().saturating_sub(last.at_unix_ms) as f64 / 1000.0;
    serde_json::json!({
        "available": true,
        "warning": status.warning,
        "read_unix_ms": last.at_unix_ms,
        "age_seconds": age_seconds,
        "overdue": age_seconds * 1000.0 >= monitor.settings().max_age_ms() as f64,
        "attributes": last.attributes,
        "passed": last.passed,
        "model": last.model,
        "serial": last.serial,
        "alerts": status.alerts,
        "last_alerts": status.last_alerts.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "reads": status.reads,
        "skipped_off": status.skipped_off,
        "last_error": status.last_error,
    })
}

/// The `permafrost_disk_smart_*` figures at a scrape.
#[derive(Debug)]
pub(crate) struct Figures {
    disks: Vec<DiskSmart>,
    settings: SmartSettings,
}

impl Figures {
    pub(crate) fn of(monitor: &SmartMonitor) -> Figures {
        Figures {
            disks: monitor.status(),
            settings: monitor.settings().clone(),
        }
    }
}

fn disk_label(disk: usize) -> Labels {
    vec![("disk", disk.to_string())]
}

impl Collector for Figures {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let read = || {
            self.disks
                .iter()
                .enumerate()
                .filter_map(|(i, d)| d.last.as_ref().map(|r| (i, d, r)))
        };
        let ids: Vec<u32> = WATCHED
            .iter()
            .map(|w| w.0)
            .chain([START_STOP, LOAD_CYCLE])
            .collect();
        gauge(
            &mut e,
            "permafrost_disk_smart_attribute_raw",
            "Raw value of the watched SMART attributes (5, 187, 188, 197, 198) and of start/stop (4) and load-cycle (193) counts, at the disk's last reading",
            read().flat_map(|(i, _, r)| {
                ids.iter().filter_map(move |&id| {
                    r.attributes.get(&id).map(|&v| {
                        (
                            vec![
                                ("disk", i.to_string()),
                                ("id", id.to_string()),
                                ("name", attribute_name(id)),
                            ],
                            v as f64,
                        )
                    })
                })
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_smart_rating_used_ratio",
            "Start/stop (4) and load-cycle (193) counts over the drive's rating ([smart] start_stop_rating, load_cycle_rating)",
            read().flat_map(|(i, _, r)| {
                [
                    (START_STOP, self.settings.start_stop_rating),
                    (LOAD_CYCLE, self.settings.load_cycle_rating),
                ]
                .into_iter()
                .filter(|&(_, rating)| rating > 0)
                .filter_map(move |(id, rating)| {
                    r.attributes.get(&id).map(|&v| {
                        (
                            vec![("disk", i.to_string()), ("id", id.to_string())],
                            v as f64 / rating as f64,
                        )
                    })
                })
            }),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_smart_warning",
            "1 when the disk's last SMART reading needs attention: a watched count above 0, a count near its rating, or failed health",
            read().map(|(i, d, _)| (disk_label(i), f64::from(u8::from(d.warning)))),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_smart_health_passed",
            "The drive's overall SMART health assessment at its last reading (1 passed, 0 failed)",
            read()
                .filter_map(|(i, _, r)| r.passed.map(|p| (disk_label(i), f64::from(u8::from(p))))),
        )?;
        gauge(
            &mut e,
            "permafrost_disk_smart_last_read_timestamp_seconds",
            "When the disk's SMART was last read (only ever at a spin-up made for other work)",
            read().map(|(i, _, r)| (disk_label(i), r.at_unix_ms as f64 / 1000.0)),
        )?;
        let per_disk = |f: fn(&DiskSmart) -> u64| -> Vec<(Labels, f64)> {
            self.disks
                .iter()
                .enumerate()
                .map(|(i, d)| (disk_label(i), f(d) as f64))
                .collect()
        };
        counter(
            &mut e,
            "permafrost_disk_smart_alerts",
            "SMART alerts raised in this server's life (a watched count rose, a count reached its rating's warning share, health failed)",
            per_disk(|d| d.alerts),
        )?;
        counter(
            &mut e,
            "permafrost_disk_smart_reads",
            "SMART readings in this server's life",
            per_disk(|d| d.reads),
        )?;
        counter(
            &mut e,
            "permafrost_disk_smart_skipped",
            "SMART readings due at a spin-up but skipped because the disk was off again (never woken for SMART)",
            per_disk(|d| d.skipped_off),
        )?;
        counter(
            &mut e,
            "permafrost_disk_smart_errors",
            "SMART readings that failed (smartctl missing or failing, unreadable file)",
            per_disk(|d| d.errors),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use permafrost_disk::smart::SmartAlert;
    use prometheus_client::registry::Registry;

    #[test]
    fn a_risen_reallocated_count_shows_in_the_metrics() {
        let reading = SmartReading {
            at_unix_ms: 1_780_000_000_000,
            attributes: [(5, 8), (4, 45_000), (9, 1)].into_iter().collect(),
            passed: Some(true),
            model: None,
            serial: Some("S".into()),
        };
        let figures = Figures {
            disks: vec![
                DiskSmart::default(),
                DiskSmart {
                    last: Some(reading),
                    warning: true,
                    last_alerts: vec![SmartAlert::Rose {
                        id: 5,
                        from: 0,
                        to: 8,
                    }],
                    alerts: 1,
                    reads: 2,
                    ..DiskSmart::default()
                },
            ],
            settings: SmartSettings::default(),
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(figures));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"permafrost_disk_smart_attribute_raw{disk="1",id="5",name="reallocated_sectors"} 8"#,
            r#"permafrost_disk_smart_warning{disk="1"} 1"#,
            r#"permafrost_disk_smart_alerts_total{disk="1"} 1"#,
            r#"permafrost_disk_smart_alerts_total{disk="0"} 0"#,
            r#"permafrost_disk_smart_rating_used_ratio{disk="1",id="4"} 0.9"#,
            r#"permafrost_disk_smart_last_read_timestamp_seconds{disk="1"} 1780000000.0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(
            !text.contains(r#"id="9""#),
            "only the watched and rated attributes"
        );
        assert!(
            !text.contains(r#"permafrost_disk_smart_warning{disk="0"}"#),
            "disk 0 was never read"
        );
    }
}
