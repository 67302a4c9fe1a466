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
}

impl HdparmPower {
    /// A controller for `device`. Fails with a clear message if `hdparm` is not
    /// installed, so a misconfiguration shows at startup, not at the first spin-down.
    pub fn new(device: impl Into<PathBuf>) -> io::Result<HdparmPower> {
        let device = device.into();
        require_tool("hdparm", &device)?;
        Ok(HdparmPower { device })
    }
}

impl PowerController for HdparmPower {
    fn spin_up(&self) -> io::Result<()> {
        read_first_block(&self.device)
    }
    fn spin_down(&self) -> io::Result<()> {
        run_tool(
            "hdparm",
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
}

impl ScsiStartStopPower {
    /// A controller for `device`. Fails with a clear message if `sg_start` is
    /// not installed.
    pub fn new(device: impl Into<PathBuf>) -> io::Result<ScsiStartStopPower> {
        let device = device.into();
        require_tool("sg_start", &device)?;
        Ok(ScsiStartStopPower { device })
    }
}

impl PowerController for ScsiStartStopPower {
    fn spin_up(&self) -> io::Result<()> {
        run_tool(
            "sg_start",
            &["--start".as_ref(), self.device.as_os_str()],
            &self.device,
        )
    }
    fn spin_down(&self) -> io::Result<()> {
        run_tool(
            "sg_start",
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

/// Error unless `program` can be found on PATH.
fn require_tool(program: &str, device: &Path) -> io::Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir.join(program).is_file()) {
        return Ok(());
    }
    Err(missing_tool(program, device))
}

fn missing_tool(program: &str, device: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{program} is not installed (not found on PATH); it is needed to control the power of {}", device.display()),
    )
}

/// Run `program args`, turning a missing program or a failed exit into an
/// error that names the command and carries its stderr.
fn run_tool(program: &str, args: &[&std::ffi::OsStr], device: &Path) -> io::Result<()> {
    let output = Command::new(program).args(args).output().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            missing_tool(program, device)
        } else {
            io::Error::new(e.kind(), format!("cannot run {program}: {e}"))
        }
    })?;
    if output.status.success() {
        return Ok(());
    }
    let command = std::iter::once(program.to_string())
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
        let err = run_tool("permafrost-no-such-tool", &["-y".as_ref()], device).unwrap_err();
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
            "sh",
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
        };
        let message = controller.spin_up().unwrap_err().to_string();
        assert!(message.contains("/nonexistent/permafrost-dev"), "{message}");
    }
}
