//! Windows Job Objects: a process tree that dies with its owner.
//!
//! A [`Job`] is created with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`: when its
//! last handle closes — [`Job`] dropped, or the owning process ended in any
//! way, killed included — Windows terminates every process in it. A process
//! started by [`Job::spawn`] is put in the job before its first instruction
//! runs (it is created suspended, assigned, then resumed), so everything it
//! starts (a launcher's game, the game's helpers) is in the job too. This is
//! the Windows counterpart of the guard process collectors use on Linux.

use std::io;
use std::os::windows::io::AsRawHandle as _;
use std::os::windows::process::CommandExt as _;
use std::process::{Child, Command};

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    OpenThread, ResumeThread, CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED, THREAD_SUSPEND_RESUME,
};

/// A kill-on-close job object (see the module docs).
#[derive(Debug)]
pub struct Job {
    handle: HANDLE,
}

// SAFETY: a job handle is a kernel object handle, usable from any thread.
unsafe impl Send for Job {}
// SAFETY: every method only passes the handle to thread-safe kernel calls.
unsafe impl Sync for Job {}

impl Job {
    /// A new, empty job whose processes all end when it is dropped (or its
    /// owner dies).
    pub fn new() -> io::Result<Self> {
        // SAFETY: null attributes and name create an anonymous job; the
        // returned handle is owned by the `Job` (closed on drop).
        let handle = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if handle.is_null() {
            return Err(io::Error::last_os_error());
        }
        let job = Self { handle };
        // SAFETY: the struct is plain data, valid when zeroed.
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: `info` is a valid JOBOBJECT_EXTENDED_LIMIT_INFORMATION of the
        // size passed, alive for the call.
        let ok = unsafe {
            SetInformationJobObject(
                job.handle,
                JobObjectExtendedLimitInformation,
                (&raw const info).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(job)
    }

    /// Starts `cmd` inside the job (suspended, assigned, resumed: nothing it
    /// starts escapes the job), in a console process group of its own (a
    /// Ctrl-C in the collector's console is the collector's to handle).
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        cmd.creation_flags(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP);
        let mut child = cmd.spawn()?;
        // SAFETY: both handles are valid: the job's (owned) and the child's
        // (owned by `child`, alive for the call).
        let ok = unsafe { AssignProcessToJobObject(self.handle, child.as_raw_handle() as HANDLE) };
        if ok == 0 {
            let e = io::Error::last_os_error();
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        if let Err(e) = resume_threads(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok(child)
    }

    /// Processes still alive in the job (0 once the whole tree has ended).
    pub fn active_processes(&self) -> io::Result<u32> {
        // SAFETY: plain data, valid when zeroed.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable and of the size passed; the job handle is valid.
        let ok = unsafe {
            QueryInformationJobObject(
                self.handle,
                JobObjectBasicAccountingInformation,
                (&raw mut info).cast(),
                std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(info.ActiveProcesses)
    }

    /// Ends every process in the job now (exit code 1).
    pub fn terminate(&self) -> io::Result<()> {
        // SAFETY: the job handle is valid; TerminateJobObject has no memory effects.
        if unsafe { TerminateJobObject(self.handle, 1) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: the handle is owned by this `Job` and closed once; closing
        // the last handle ends the job's processes (kill-on-close).
        unsafe {
            CloseHandle(self.handle);
        }
    }
}

/// Resumes every thread of process `pid` (a process created suspended has one).
fn resume_threads(pid: u32) -> io::Result<()> {
    // SAFETY: a thread snapshot of the whole system; the handle is closed below.
    let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if snap == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain data, valid when zeroed; dwSize set as the API requires.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut resumed = 0;
    // SAFETY: `snap` is a valid snapshot handle and `entry` a writable
    // THREADENTRY32 with its size set.
    let mut more = unsafe { Thread32First(snap, &raw mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: opens a thread by id for resuming; the handle is closed below.
            let t = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
            if !t.is_null() {
                // SAFETY: `t` is a valid thread handle opened above, closed once.
                unsafe {
                    ResumeThread(t);
                    CloseHandle(t);
                }
                resumed += 1;
            }
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snap, &raw mut entry) } != 0;
    }
    // SAFETY: the snapshot handle is valid and closed once.
    unsafe {
        CloseHandle(snap);
    }
    if resumed == 0 {
        return Err(io::Error::other(format!("no thread of process {pid} to resume")));
    }
    Ok(())
}
