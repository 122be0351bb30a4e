//! Which file system holds an open file, and what that means for reading it (the portable half: the table of
//! Linux `statfs` magic numbers and their classes; the system calls are in `unix.rs` / `windows.rs`).
//!
//! The magic numbers are the kernel's (`include/uapi/linux/magic.h`, and the out-of-tree Lustre, GPFS and
//! BeeGFS clients' own constants). virtiofs reports FUSE's number: it is FUSE in the kernel.

/// What kind of storage a file system is, as far as reading it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsClass {
    /// A block-device file system on this machine (ext4, xfs, btrfs, zfs, overlayfs over them...).
    Local,
    /// Memory (tmpfs, ramfs): pages are already in memory.
    Memory,
    /// A network or cluster file system (NFS, Lustre, GPFS, CephFS, CIFS/SMB, 9p, BeeGFS...): a mapping
    /// faults over the network page by page, and a file changed on another machine can raise SIGBUS.
    Network,
    /// A user-space file system (FUSE, which virtiofs also reports): every fault is a round trip to a
    /// daemon, and a daemon that dies or a file that shrinks raises SIGBUS in a reader of a mapping.
    UserSpace,
    /// A magic number this table does not know.
    Unknown,
}

impl FsClass {
    /// `local`, `memory`, `network`, `user-space`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            FsClass::Local => "local",
            FsClass::Memory => "memory",
            FsClass::Network => "network",
            FsClass::UserSpace => "user-space",
            FsClass::Unknown => "unknown",
        }
    }
}

/// The file system of an open file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSystem {
    /// Its short name (`ext4`, `nfs`, `fuse`, ...); `unknown` when the table does not know the magic number,
    /// or the system's own name where there is no magic number (Windows).
    pub name: String,
    /// `statfs`'s `f_type` (0 where the system has none).
    pub magic: u64,
    /// What kind of storage it is.
    pub class: FsClass,
}

/// Linux `f_type` values: (magic, name, class).
const TABLE: &[(u64, &str, FsClass)] = &[
    (0xEF53, "ext4", FsClass::Local), // ext2, ext3 and ext4 share it
    (0x5846_5342, "xfs", FsClass::Local),
    (0x9123_683E, "btrfs", FsClass::Local),
    (0x2FC1_2FC1, "zfs", FsClass::Local),
    (0xF2F5_2010, "f2fs", FsClass::Local),
    (0x794C_7630, "overlayfs", FsClass::Local),
    (0x7371_7368, "squashfs", FsClass::Local),
    (0x4D44, "vfat", FsClass::Local),
    (0x5346_544E, "ntfs", FsClass::Local),
    (0x2011_BAB0, "exfat", FsClass::Local),
    (0x0102_1994, "tmpfs", FsClass::Memory),
    (0x8584_58F6, "ramfs", FsClass::Memory),
    (0x6969, "nfs", FsClass::Network),
    (0x0BD0_0BD0, "lustre", FsClass::Network),
    (0x4750_4653, "gpfs", FsClass::Network),
    (0x00C3_6400, "cephfs", FsClass::Network),
    (0xFF53_4D42, "cifs", FsClass::Network),
    (0xFE53_4D42, "smb2", FsClass::Network),
    (0x517B, "smb", FsClass::Network),
    (0x0102_1997, "9p", FsClass::Network),
    (0x1983_0326, "beegfs", FsClass::Network),
    (0x6B41_4653, "afs", FsClass::Network),
    (0x6573_5546, "fuse", FsClass::UserSpace), // virtiofs too
];

/// The file system of a Linux `f_type` value.
pub fn from_magic(magic: u64) -> FileSystem {
    // f_type is a signed word on some ABIs: compare the low 32 bits, as the kernel's values are 32-bit.
    let m = magic & 0xFFFF_FFFF;
    match TABLE.iter().find(|(v, _, _)| *v == m) {
        Some(&(v, name, class)) => FileSystem { name: name.to_string(), magic: v, class },
        None => FileSystem { name: "unknown".to_string(), magic: m, class: FsClass::Unknown },
    }
}

/// The file-system type of the mount whose device is `major:minor`, from a `/proc/self/mountinfo` text (fields:
/// id, parent, `major:minor`, root, mount point, options, optional fields, `-`, type, source, options).
pub fn mount_type_in(mountinfo: &str, major: u32, minor: u32) -> Option<String> {
    let dev = format!("{major}:{minor}");
    mountinfo.lines().rev().find_map(|line| {
        let mut f = line.split(' ');
        if f.nth(2)? != dev {
            return None;
        }
        let (_, after) = line.split_once(" - ")?;
        after.split(' ').next().filter(|t| !t.is_empty()).map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_type_is_found_by_device() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    90 22 0:52 / /mnt/b rw,nosuid,nodev,relatime shared:50 - fuse.bindfs /src rw,user_id=0\n\
                    91 22 0:53 / /mnt/v rw,relatime - virtiofs share rw\n";
        assert_eq!(mount_type_in(info, 0, 52).as_deref(), Some("fuse.bindfs"));
        assert_eq!(mount_type_in(info, 0, 53).as_deref(), Some("virtiofs"));
        assert_eq!(mount_type_in(info, 8, 1).as_deref(), Some("ext4"));
        assert_eq!(mount_type_in(info, 0, 99), None);
    }

    #[test]
    fn the_file_systems_the_issue_names_are_classified() {
        for (magic, name, class) in [
            (0x6969u64, "nfs", FsClass::Network),
            (0x0BD0_0BD0, "lustre", FsClass::Network),
            (0x4750_4653, "gpfs", FsClass::Network),
            (0x00C3_6400, "cephfs", FsClass::Network),
            (0xFF53_4D42, "cifs", FsClass::Network),
            (0xFE53_4D42, "smb2", FsClass::Network),
            (0x0102_1997, "9p", FsClass::Network),
            (0x6573_5546, "fuse", FsClass::UserSpace),
            (0xEF53, "ext4", FsClass::Local),
            (0x5846_5342, "xfs", FsClass::Local),
            (0x9123_683E, "btrfs", FsClass::Local),
            (0x794C_7630, "overlayfs", FsClass::Local),
            (0x0102_1994, "tmpfs", FsClass::Memory),
        ] {
            let f = from_magic(magic);
            assert_eq!((f.name.as_str(), f.class, f.magic), (name, class, magic), "{magic:#x}");
        }
        // A sign-extended f_type (a 32-bit magic with its top bit set, stored in a signed 64-bit word).
        assert_eq!(from_magic(0xFFFF_FFFF_FF53_4D42).name, "cifs");
        let u = from_magic(0x1234_5678);
        assert_eq!((u.name.as_str(), u.class, u.magic), ("unknown", FsClass::Unknown, 0x1234_5678));
    }
}
