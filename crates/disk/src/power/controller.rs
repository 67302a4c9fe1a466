//! Power controllers: what physically spins a drive up or down.

use crate::file::O_DIRECT;
use crate::{AlignedBuf, BLOCK_BYTES};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Changes the power state of one physical drive. Calls may block for as long
/// as the drive takes (seconds); the manager makes them outside its locks.
pub trait PowerController: Send + Sync {
    /// Bring the drive to a state where it serves I/O.
    fn spin_up(&self) -> io::Result<()>;
    /// Stop the drive's motor (standby or power off).
    fn spin_down(&self) -> io::Result<()>;
    /// What this controller does, for logs and the dashboard.
    fn describe(&self) -> String;
}

/// No motor to control: for file-backed disks (and memory disks).
///
/// Spinning up and down does nothing at all. Only the [`super::PowerModel`]
/// runs, and the spin-up delay is simulated by the [`super::PowerManager`]
/// sleeping until the model says the disk is ready. Watts and energy reported
/// for such disks are the model's estimate, not a measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimulatedPower;

impl PowerController for SimulatedPower {
    fn spin_up(&self) -> io::Result<()> {
        Ok(())
    }
    fn spin_down(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "simulated power (file-backed disk: no motor, only the power model runs)".to_string()
    }
}

/// An ATA/SATA drive controlled with `hdparm`.
///
/// - Spin down: `hdparm -y DEVICE` (STANDBY IMMEDIATE). The drive stays
///   powered and draws standby power (2.19 W in the thesis), so configure
///   `watts_off` accordingly ([`super::PowerProfile::standby`]).
/// - Spin up: one O_DIRECT read of block 0 of the device. A drive in standby
///   spins up on the first media access and the read returns once it is ready,
///   so this both wakes the drive and waits for it. (`hdparm -C` only reports
///   the state and does not wake every drive, so it is not used.)
#[derive(Clone, Debug)]
pub struct HdparmPower {
    /// The block device, e.g. `/dev/sdb`.
    pub device: PathBuf,
    /// The `hdparm` program (found on PATH by [`HdparmPower::new`]).
    pub program: PathBuf,
}

impl HdparmPower {
    /// A controller for `device`. Fails with a clear message if `hdparm` is not
    /// installed, so a misconfiguration shows at startup, not at the first spin-down.
    pub fn new(device: impl Into<PathBuf>) -> io::Result<HdparmPower> {
        let device = device.into();
        let program = require_tool("hdparm", &device)?;
        Ok(HdparmPower { device, program })
    }
}

impl PowerController for HdparmPower {
    fn spin_up(&self) -> io::Result<()> {
        read_first_block(&self.device)
    }
    fn spin_down(&self) -> io::Result<()> {
        run_tool(
            &self.program,
            &["-y".as_ref(), self.device.as_os_str()],
            &self.device,
        )
    }
    fn describe(&self) -> String {
        format!(
            "hdparm standby on {} (spin-up by reading block 0)",
            self.device.display()
        )
    }
}

/// A SCSI/SAS drive controlled with `sg_start` (sg3_utils): START STOP UNIT.
///
/// `sg_start --stop DEVICE` spins it down (the drive stays powered, like
/// standby); `sg_start --start DEVICE` spins it up and returns when it is ready.
#[derive(Clone, Debug)]
pub struct ScsiStartStopPower {
    /// The SCSI device, e.g. `/dev/sdc` or `/dev/sg3`.
    pub device: PathBuf,
    /// The `sg_start` program (found on PATH by [`ScsiStartStopPower::new`]).
    pub program: PathBuf,
}

impl ScsiStartStopPower {
    /// A controller for `device`. Fails with a clear message if `sg_start` is
    /// not installed.
    pub fn new(device: impl Into<PathBuf>) -> io::Result<ScsiStartStopPower> {
        let device = device.into();
        let program = require_tool("sg_start", &device)?;
        Ok(ScsiStartStopPower { device, program })
    }
}

impl PowerController for ScsiStartStopPower {
    fn spin_up(&self) -> io::Result<()> {
        run_tool(
            &self.program,
            &["--start".as_ref(), self.device.as_os_str()],
            &self.device,
        )
    }
    fn spin_down(&self) -> io::Result<()> {
        run_tool(
            &self.program,
            &["--stop".as_ref(), self.device.as_os_str()],
            &self.device,
        )
    }
    fn describe(&self) -> String {
        format!(
            "SCSI START STOP UNIT (sg_start) on {}",
            self.device.display()
        )
    }
}

/// A drive in an SES enclosure slot whose power the enclosure switches (sg3_utils `sg_ses`).
///
/// - Spin down: `sg_ses --dev-slot-num=SLOT --set=devoff ENCLOSURE` cuts the slot's power: the drive
///   draws nothing (`watts_off = 0`, the thesis's default), and its block device goes away.
/// - Spin up: `sg_ses --dev-slot-num=SLOT --clear=devoff ENCLOSURE`, then wait until `device` (use a stable
///   `/dev/disk/by-id/…` path: the kernel may name the drive differently when it comes back) answers an
///   O_DIRECT read of block 0, for at most `ready_timeout_ms`.
#[derive(Clone, Debug)]
pub struct SesSlotPower {
    /// The drive's block device as it appears while powered.
    pub device: PathBuf,
    /// The enclosure's SCSI generic device, e.g. `/dev/sg7`.
    pub enclosure: PathBuf,
    /// The slot number of the drive in the enclosure (`--dev-slot-num`).
    pub slot: u32,
    /// How long a spin-up waits for the drive to come back.
    pub ready_timeout_ms: u64,
    /// The `sg_ses` program (found on PATH by [`SesSlotPower::new`]).
    pub program: PathBuf,
}

impl SesSlotPower {
    /// Default time a powered-on slot has to present its drive: spin-up plus the kernel's rescan.
    pub const READY_TIMEOUT_MS_DEFAULT: u64 = 120_000;

    /// A controller for the drive `device` in `slot` of `enclosure`. Fails with a clear message if `sg_ses` is
    /// not installed.
    pub fn new(
        device: impl Into<PathBuf>,
        enclosure: impl Into<PathBuf>,
        slot: u32,
    ) -> io::Result<SesSlotPower> {
        let device = device.into();
        let program = require_tool("sg_ses", &device)?;
        Ok(SesSlotPower {
            device,
            enclosure: enclosure.into(),
            slot,
            ready_timeout_ms: Self::READY_TIMEOUT_MS_DEFAULT,
            program,
        })
    }

    fn slot_command(&self, action: &str) -> io::Result<()> {
        let slot = format!("--dev-slot-num={}", self.slot);
        run_tool(
            &self.program,
            &[slot.as_ref(), action.as_ref(), self.enclosure.as_os_str()],
            &self.device,
        )
    }
}

impl PowerController for SesSlotPower {
    fn spin_up(&self) -> io::Result<()> {
        self.slot_command("--clear=devoff")?;
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(self.ready_timeout_ms);
        loop {
            match read_first_block(&self.device) {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "slot {} of {} was powered on but {} did not answer within {} ms: {e}",
                            self.slot,
                            self.enclosure.display(),
                            self.device.display(),
                            self.ready_timeout_ms
                        ),
                    ))
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
        }
    }
    fn spin_down(&self) -> io::Result<()> {
        self.slot_command("--set=devoff")
    }
    fn describe(&self) -> String {
        format!(
            "SES slot power (sg_ses) of slot {} in {} for {}",
            self.slot,
            self.enclosure.display(),
            self.device.display()
        )
    }
}

/// How the power of one disk is controlled: the configuration form of a [`PowerController`], stored with the
/// grid (`grid.toml`). Only `Simulated` for file-backed disks; real drives get a real controller only when the
/// operator configures one.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PowerControl {
    /// No motor is controlled; the power model runs on its own ([`SimulatedPower`]).
    #[default]
    Simulated,
    /// `hdparm -y` standby ([`HdparmPower`]).
    Hdparm,
    /// SCSI START STOP UNIT with `sg_start` ([`ScsiStartStopPower`]).
    ScsiStartStop,
    /// Enclosure slot power with `sg_ses` ([`SesSlotPower`]).
    SesSlot { enclosure: PathBuf, slot: u32 },
}

impl PowerControl {
    /// The controller for the drive at `device`; fails with a clear message if its tool is not installed.
    pub fn controller(&self, device: &Path) -> io::Result<std::sync::Arc<dyn PowerController>> {
        Ok(match self {
            PowerControl::Simulated => std::sync::Arc::new(SimulatedPower),
            PowerControl::Hdparm => std::sync::Arc::new(HdparmPower::new(device)?),
            PowerControl::ScsiStartStop => std::sync::Arc::new(ScsiStartStopPower::new(device)?),
            PowerControl::SesSlot { enclosure, slot } => {
                std::sync::Arc::new(SesSlotPower::new(device, enclosure, *slot)?)
            }
        })
    }
}

impl std::str::FromStr for PowerControl {
    type Err = String;
    /// `simulated`, `hdparm`, `scsi`, or `ses:ENCLOSURE:SLOT` (e.g. `ses:/dev/sg7:4`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "simulated" => return Ok(PowerControl::Simulated),
            "hdparm" => return Ok(PowerControl::Hdparm),
            "scsi" => return Ok(PowerControl::ScsiStartStop),
            _ => {}
        }
        let bad = || {
            format!(
                "unknown power control {s:?}: expected simulated, hdparm, scsi or ses:ENCLOSURE:SLOT (e.g. ses:/dev/sg7:4)"
            )
        };
        let rest = s.strip_prefix("ses:").ok_or_else(bad)?;
        let (enclosure, slot) = rest.rsplit_once(':').ok_or_else(bad)?;
        let slot = slot.parse().map_err(|_| bad())?;
        if enclosure.is_empty() {
            return Err(bad());
        }
        Ok(PowerControl::SesSlot {
            enclosure: PathBuf::from(enclosure),
            slot,
        })
    }
}

/// Where `program` is on PATH; an error naming the program and the device it is needed for otherwise.
fn require_tool(program: &str, device: &Path) -> io::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| missing_tool(program, device))
}

fn missing_tool(program: &str, device: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{program} is not installed (not found on PATH); it is needed to control the power of {}", device.display()),
    )
}

/// Run `program args`, turning a missing program or a failed exit into an
/// error that names the command and carries its stderr.
fn run_tool(program: &Path, args: &[&std::ffi::OsStr], device: &Path) -> io::Result<()> {
    let name = program.display().to_string();
    // ETXTBSY: the program file is open for writing somewhere, e.g. a package upgrade replacing it or a
    // process forked while it was being written; that passes within moments, so try again a few times.
    let mut output = Command::new(program).args(args).output();
    for _ in 0..20 {
        match &output {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                output = Command::new(program).args(args).output();
            }
            _ => break,
        }
    }
    let output = output.map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            missing_tool(&name, device)
        } else {
            io::Error::new(e.kind(), format!("cannot run {name}: {e}"))
        }
    })?;
    if output.status.success() {
        return Ok(());
    }
    let command = std::iter::once(name.clone())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    Err(io::Error::other(format!(
        "`{command}` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Read block 0 of `device` with O_DIRECT, bypassing the page cache so the
/// read reaches the media (and wakes the drive).
fn read_first_block(device: &Path) -> io::Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(O_DIRECT)
        .open(device)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot open {} to spin it up: {e}", device.display()),
            )
        })?;
    let mut block = AlignedBuf::zeroed(BLOCK_BYTES);
    file.read_exact_at(&mut block, 0).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("spin-up read of {} failed: {e}", device.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_is_a_clear_not_found_error() {
        let device = Path::new("/dev/sdz");
        let err = run_tool(
            Path::new("permafrost-no-such-tool"),
            &["-y".as_ref()],
            device,
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let message = err.to_string();
        assert!(
            message.contains("permafrost-no-such-tool is not installed"),
            "{message}"
        );
        assert!(message.contains("/dev/sdz"), "{message}");
        assert!(require_tool("permafrost-no-such-tool", device).is_err());
    }

    #[test]
    fn failing_tool_reports_command_and_stderr() {
        let err = run_tool(
            Path::new("sh"),
            &["-c".as_ref(), "echo boom >&2; exit 3".as_ref()],
            Path::new("/dev/x"),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("`sh -c"), "{message}");
        assert!(message.contains("boom"), "{message}");
    }

    #[test]
    fn hdparm_spin_up_of_missing_device_names_the_device() {
        let controller = HdparmPower {
            device: PathBuf::from("/nonexistent/permafrost-dev"),
            program: PathBuf::from("hdparm"),
        };
        let message = controller.spin_up().unwrap_err().to_string();
        assert!(message.contains("/nonexistent/permafrost-dev"), "{message}");
    }

    /// A stand-in for a power tool: a shell script that appends its arguments to `log` and exits 0.
    fn recording_tool(dir: &Path, log: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("tool");
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn real_controllers_run_the_documented_commands() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let program = recording_tool(dir.path(), &log);
        // A readable "device" so spin-ups that read block 0 succeed.
        let device = dir.path().join("device");
        std::fs::write(&device, vec![0u8; BLOCK_BYTES]).unwrap();
        let dev = device.display().to_string();

        let hdparm = HdparmPower {
            device: device.clone(),
            program: program.clone(),
        };
        hdparm.spin_down().unwrap();
        let scsi = ScsiStartStopPower {
            device: device.clone(),
            program: program.clone(),
        };
        scsi.spin_up().unwrap();
        scsi.spin_down().unwrap();
        let ses = SesSlotPower {
            device: device.clone(),
            enclosure: PathBuf::from("/dev/sg7"),
            slot: 4,
            ready_timeout_ms: 1_000,
            program,
        };
        ses.spin_down().unwrap();
        let read_ok = ses.spin_up();
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            vec![
                format!("-y {dev}"),
                format!("--start {dev}"),
                format!("--stop {dev}"),
                "--dev-slot-num=4 --set=devoff /dev/sg7".to_string(),
                "--dev-slot-num=4 --clear=devoff /dev/sg7".to_string(),
            ]
        );
        // O_DIRECT may be refused by the temporary directory's file system; then the wait times out with
        // a message naming the slot.
        if let Err(e) = read_ok {
            assert!(e.to_string().contains("slot 4 of /dev/sg7"), "{e}");
        }
    }

    #[test]
    fn ses_spin_up_times_out_naming_slot_and_device() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let ses = SesSlotPower {
            device: PathBuf::from("/nonexistent/by-id/ata-disk"),
            enclosure: PathBuf::from("/dev/sg7"),
            slot: 2,
            ready_timeout_ms: 300,
            program: recording_tool(dir.path(), &log),
        };
        let err = ses.spin_up().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let message = err.to_string();
        assert!(message.contains("slot 2 of /dev/sg7"), "{message}");
        assert!(message.contains("/nonexistent/by-id/ata-disk"), "{message}");
    }

    #[test]
    fn power_control_parses_and_refuses_clearly() {
        assert_eq!("hdparm".parse(), Ok(PowerControl::Hdparm));
        assert_eq!("scsi".parse(), Ok(PowerControl::ScsiStartStop));
        assert_eq!("simulated".parse(), Ok(PowerControl::Simulated));
        assert_eq!(
            "ses:/dev/sg7:4".parse(),
            Ok(PowerControl::SesSlot {
                enclosure: PathBuf::from("/dev/sg7"),
                slot: 4
            })
        );
        for bad in [
            "",
            "ses",
            "ses:/dev/sg7",
            "ses::4",
            "ses:/dev/sg7:x",
            "smart",
        ] {
            let err = bad.parse::<PowerControl>().unwrap_err();
            assert!(
                err.contains("expected simulated, hdparm, scsi"),
                "{bad}: {err}"
            );
        }
        assert!(PowerControl::Simulated
            .controller(Path::new("/dev/x"))
            .unwrap()
            .describe()
            .contains("simulated"));
    }
}
