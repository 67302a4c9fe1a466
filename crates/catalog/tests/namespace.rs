//! The file system namespace of the mount (`fs_*` methods), through the `Catalog` trait.

use permafrost_catalog::*;

mod common;
use common::Backend;

fn open(b: Backend) -> (common::Guard, Box<dyn Catalog>) {
    let (guard, catalog) = common::open(b);
    catalog
        .create_bucket("b", &BucketSettings::default())
        .unwrap();
    catalog
        .create_bucket("c", &BucketSettings::default())
        .unwrap();
    (guard, Box::new(catalog))
}

fn cid(n: u8) -> ContentId {
    ContentId {
        hash: [n; 32],
        encoding: Encoding::Identity,
    }
}

fn put(c: &dyn Catalog, bucket: &str, key: &str, n: u8) {
    let object = ObjectRecord {
        bucket: bucket.into(),
        key: key.into(),
        content: cid(n),
        size_bytes: 100,
        etag: format!("\"{n}\""),
        last_modified_ms: 1,
        content_type: None,
        user_metadata: vec![],
        checksums: vec![],
        dataset: bucket.into(),
        version_id: String::new(),
        attributes: Default::default(),
        expires_ms: None,
    };
    let content = NewContent {
        id: cid(n),
        logical_bytes: 100,
        stored_bytes: 40,
        stored_form: StoredForm::Raw,
        chunk_index: vec![],
        md5: [n; 16],
        cache_path: format!("contents/{n}"),
        inline: None,
    };
    c.put_object(&object, &content, 10).unwrap();
}

const ATTRS: DirAttrs = DirAttrs {
    mode: 0o755,
    uid: 7,
    gid: 8,
    mtime_ns: 1_000,
};

fn dir(bucket: &str, path: &str) -> DirRecord {
    DirRecord {
        bucket: bucket.into(),
        path: path.into(),
        attrs: ATTRS,
        created_ms: 5,
    }
}

fn refusal(result: Result<()>) -> Refusal {
    match result {
        Err(CatalogError::Refused { refusal, .. }) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Names of a whole directory listing, read in pages of `page`.
fn names(c: &dyn Catalog, bucket: &str, prefix: &str, page: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let p = c.fs_list(bucket, prefix, after.as_deref(), page).unwrap();
        for entry in &p.entries {
            out.push(match entry {
                FsEntry::Dir { .. } => format!("{}/", entry.name()),
                FsEntry::File(_) => entry.name().to_string(),
            });
        }
        match p.next_after {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

fn rename(from: &str, to: &str) -> FsRename {
    FsRename {
        from_bucket: "b".into(),
        from: from.into(),
        to_bucket: "b".into(),
        to: to.into(),
        no_replace: false,
        dir_attrs: ATTRS,
    }
}

fn lookup_tells_files_from_implicit_and_explicit_directories(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "runs/1/scan.bin", 1);
    c.fs_mkdir(&dir("b", "empty/"), &ATTRS).unwrap();
    match c.fs_lookup("b", "runs/1/scan.bin").unwrap() {
        Some(FsEntry::File(f)) => {
            assert_eq!(f.object.size_bytes, 100);
            assert_eq!(f.stored_bytes, 40);
            assert_eq!(f.state, ContentState::Cached);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(c.fs_lookup("b", "runs").unwrap(), Some(FsEntry::Dir { record: None, ref path }) if path == "runs/")
    );
    assert!(
        matches!(c.fs_lookup("b", "empty").unwrap(), Some(FsEntry::Dir { record: Some(ref r), .. }) if r.attrs == ATTRS)
    );
    assert_eq!(c.fs_lookup("b", "runs/2").unwrap(), None);
    assert!(matches!(
        c.fs_lookup("nope", "x"),
        Err(CatalogError::NoSuchBucket(_))
    ));
    // A key and keys under it of the same name: the directory wins.
    put(&*c, "b", "both", 2);
    put(&*c, "b", "both/inner", 3);
    assert!(matches!(
        c.fs_lookup("b", "both").unwrap(),
        Some(FsEntry::Dir { .. })
    ));
}

fn listing_merges_keys_prefixes_and_rows_in_pages_without_shadowed_or_unshowable_names(b: Backend) {
    let (_d, c) = open(b);
    for (i, key) in [
        "d/a",
        "d/x",
        "d/x.txt",
        "d/x/1",
        "d/y/2",
        "d/z",
        "d//empty-name",
        "d/./dot",
        "d/",
        "top",
    ]
    .iter()
    .enumerate()
    {
        put(&*c, "b", key, i as u8 + 1);
    }
    c.fs_mkdir(&dir("b", "d/m/"), &ATTRS).unwrap();
    c.fs_mkdir(&dir("b", "d/y/z/"), &ATTRS).unwrap();
    let long = format!("d/{}", "n".repeat(300));
    put(&*c, "b", &long, 20);
    let want = vec!["a", "m/", "x.txt", "x/", "y/", "z"];
    for page in [1, 2, 3, 1000] {
        assert_eq!(names(&*c, "b", "d/", page), want, "pages of {page}");
    }
    assert_eq!(names(&*c, "b", "", 1000), vec!["d/", "top"]);
    // The explicit row of y/z/ makes y/ one directory, not two.
    assert_eq!(names(&*c, "b", "d/y/", 1000), vec!["2", "z/"]);
    let page = c.fs_list("b", "d/", None, 1000).unwrap();
    assert!(matches!(
        &page.entries[1],
        FsEntry::Dir {
            record: Some(_),
            ..
        }
    ));
    assert!(matches!(
        &page.entries[3],
        FsEntry::Dir { record: None, .. }
    ));
}

fn a_directory_emptied_through_the_mount_stays_until_rmdir(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "a/b/f", 1);
    c.fs_unlink("b", "a/b/f", &ATTRS, 20).unwrap();
    assert!(matches!(
        c.fs_lookup("b", "a/b").unwrap(),
        Some(FsEntry::Dir {
            record: Some(_),
            ..
        })
    ));
    assert_eq!(
        refusal(c.fs_unlink("b", "a/b/f", &ATTRS, 20)),
        Refusal::NotFound
    );
    // Adding or removing an entry sets the parent's modification time (and only its time).
    put(&*c, "b", "a/b/g", 2);
    let later = DirAttrs {
        mode: 0o700,
        mtime_ns: 5_000,
        ..ATTRS
    };
    c.fs_unlink("b", "a/b/g", &later, 30).unwrap();
    match c.fs_lookup("b", "a/b").unwrap() {
        Some(FsEntry::Dir {
            record: Some(r), ..
        }) => {
            assert_eq!((r.attrs.mtime_ns, r.attrs.mode), (5_000, ATTRS.mode))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        refusal(c.fs_rmdir("b", "a/", &ATTRS, 20)),
        Refusal::NotEmpty
    );
    c.fs_rmdir("b", "a/b/", &ATTRS, 20).unwrap();
    // a/ was implicit; removing its last entry keeps it.
    assert!(c.fs_lookup("b", "a").unwrap().is_some());
    c.fs_rmdir("b", "a/", &ATTRS, 20).unwrap();
    assert_eq!(c.fs_lookup("b", "a").unwrap(), None);
    assert_eq!(
        refusal(c.fs_rmdir("b", "a/", &ATTRS, 20)),
        Refusal::NotFound
    );
    let stats = c.stats().unwrap();
    assert_eq!(stats.objects, 0);
    assert!(c.check().unwrap().is_empty());
}

fn mkdir_refuses_existing_names_and_rmdir_removes_an_s3_folder_marker(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "file", 1);
    put(&*c, "b", "implicit/x", 2);
    c.fs_mkdir(&dir("b", "new/"), &ATTRS).unwrap();
    for taken in ["file/", "implicit/", "new/"] {
        assert_eq!(
            refusal(c.fs_mkdir(&dir("b", taken), &ATTRS)),
            Refusal::Exists,
            "{taken}"
        );
    }
    assert_eq!(
        refusal(c.fs_mkdir(&dir("b", "bad//"), &ATTRS)),
        Refusal::Invalid
    );
    put(&*c, "b", "marker/", 3);
    assert!(matches!(
        c.fs_lookup("b", "marker").unwrap(),
        Some(FsEntry::Dir { record: None, .. })
    ));
    c.fs_rmdir("b", "marker/", &ATTRS, 20).unwrap();
    assert_eq!(c.get_object("b", "marker/").unwrap(), None);
    assert!(c.check().unwrap().is_empty());
}

fn rename_of_a_file_replaces_a_file_and_moves_its_reference(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "dir/.f.tmp", 1);
    put(&*c, "b", "dir/f", 2);
    c.fs_rename(&rename("dir/.f.tmp", "dir/f"), 30).unwrap();
    assert_eq!(c.get_object("b", "dir/.f.tmp").unwrap(), None);
    let (object, _) = c.get_object("b", "dir/f").unwrap().unwrap();
    assert_eq!(object.content, cid(1));
    assert_eq!(c.get_content(&cid(2)).unwrap().unwrap().refcount, 0);
    assert!(c.check().unwrap().is_empty());

    put(&*c, "b", "other", 3);
    let mut no_replace = rename("other", "dir/f");
    no_replace.no_replace = true;
    assert_eq!(refusal(c.fs_rename(&no_replace, 30)), Refusal::Exists);
    assert_eq!(
        refusal(c.fs_rename(&rename("other", "dir"), 30)),
        Refusal::IsADirectory
    );
    assert_eq!(
        refusal(c.fs_rename(&rename("missing", "x"), 30)),
        Refusal::NotFound
    );
    // Across buckets.
    let mut across = rename("other", "moved");
    across.to_bucket = "c".into();
    c.fs_rename(&across, 30).unwrap();
    assert!(c.get_object("c", "moved").unwrap().is_some());
    // Renaming onto itself changes nothing.
    c.fs_rename(&rename("dir/f", "dir/f"), 30).unwrap();
    assert!(c.get_object("b", "dir/f").unwrap().is_some());
}

fn rename_of_a_directory_moves_every_key_and_row_under_it(b: Backend) {
    let (_d, c) = open(b);
    for i in 0..1200u32 {
        put(&*c, "b", &format!("src/sub{}/f{i}", i % 3), (i % 250) as u8);
    }
    c.fs_mkdir(&dir("b", "src/empty/"), &ATTRS).unwrap();
    c.fs_mkdir(&dir("b", "dst/"), &ATTRS).unwrap();
    c.fs_rename(&rename("src", "dst"), 40).unwrap();
    assert_eq!(c.fs_lookup("b", "src").unwrap(), None);
    assert_eq!(
        names(&*c, "b", "dst/", 1000),
        vec!["empty/", "sub0/", "sub1/", "sub2/"]
    );
    assert_eq!(names(&*c, "b", "dst/sub1/", 100).len(), 400);
    assert!(matches!(
        c.fs_lookup("b", "dst/empty").unwrap(),
        Some(FsEntry::Dir {
            record: Some(_),
            ..
        })
    ));
    assert!(c.check().unwrap().is_empty());

    assert_eq!(
        refusal(c.fs_rename(&rename("dst", "dst/sub0/in"), 40)),
        Refusal::Invalid
    );
    c.fs_mkdir(&dir("b", "full/"), &ATTRS).unwrap();
    put(&*c, "b", "full/x", 1);
    assert_eq!(
        refusal(c.fs_rename(&rename("dst", "full"), 40)),
        Refusal::NotEmpty
    );
    assert_eq!(
        refusal(c.fs_rename(&rename("dst", "full/x"), 40)),
        Refusal::NotADirectory
    );
    // An implicit directory renamed keeps existing as a row when moved.
    c.fs_rename(&rename("dst/sub2", "sub2-moved"), 40).unwrap();
    assert!(matches!(
        c.fs_lookup("b", "sub2-moved").unwrap(),
        Some(FsEntry::Dir {
            record: Some(_),
            ..
        })
    ));
    // A key that would grow past 1024 bytes refuses the whole rename.
    let deep = format!("d/{}", "k".repeat(1000));
    put(&*c, "b", &deep, 9);
    let long_target = "t".repeat(200);
    assert_eq!(
        refusal(c.fs_rename(&rename("d", &long_target), 40)),
        Refusal::NameTooLong
    );
    assert!(c.get_object("b", &deep).unwrap().is_some());
}

fn attributes_of_directories_and_files_change_in_the_catalog_only(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "implicit/f", 1);
    let mut record = dir("b", "implicit/");
    record.attrs.mode = 0o700;
    c.fs_set_dir(&record).unwrap();
    match c.fs_lookup("b", "implicit").unwrap() {
        Some(FsEntry::Dir {
            record: Some(r), ..
        }) => assert_eq!(r.attrs.mode, 0o700),
        other => panic!("{other:?}"),
    }
    assert_eq!(refusal(c.fs_set_dir(&dir("b", "none/"))), Refusal::NotFound);
    assert_eq!(
        refusal(c.fs_set_dir(&dir("b", "implicit/f/"))),
        Refusal::NotADirectory
    );
    let metadata = vec![("mode".to_string(), "33188".to_string())];
    c.fs_set_metadata("b", "implicit/f", &metadata).unwrap();
    assert_eq!(
        c.get_object("b", "implicit/f")
            .unwrap()
            .unwrap()
            .0
            .user_metadata,
        metadata
    );
    assert_eq!(
        refusal(c.fs_set_metadata("b", "nope", &metadata)),
        Refusal::NotFound
    );
    // Deleting the bucket takes its directory rows along.
    c.fs_unlink("b", "implicit/f", &ATTRS, 1).unwrap();
    c.fs_rmdir("b", "implicit/", &ATTRS, 1).unwrap();
    c.fs_mkdir(&dir("b", "left/"), &ATTRS).unwrap();
    c.delete_bucket("b").unwrap();
    c.create_bucket("b", &BucketSettings::default()).unwrap();
    assert_eq!(c.fs_lookup("b", "left").unwrap(), None);
}

fn persisted_time_is_recorded_when_a_content_becomes_persisted(b: Backend) {
    let (_d, c) = open(b);
    put(&*c, "b", "k", 1);
    assert_eq!(c.persisted_ms(&cid(1)).unwrap(), None);
    c.place_content(&cid(1), 0).unwrap();
    let extents = c
        .begin_extents(
            0,
            1 << 30,
            &[NewExtent {
                length_bytes: 4096,
                payload_bytes: 40,
                object_id: cid(1).object_id(),
                extent_no: 0,
                replica_id: 0,
                kind: ExtentKind::Content,
            }],
            &[cid(1)],
        )
        .unwrap();
    let segment = SegmentRecord {
        content: cid(1),
        seq: 0,
        extent_id: extents[0].extent_id,
        offset_in_payload: 0,
        length_bytes: 40,
    };
    c.finish_extents(
        &[(extents[0].extent_id, [0; 32])],
        &[segment],
        &[cid(1)],
        false,
    )
    .unwrap();
    let at = c.persisted_ms(&cid(1)).unwrap().expect("persisted");
    assert!(at >= now_ms() - 60_000 && at <= now_ms());
}

both!(
    lookup_tells_files_from_implicit_and_explicit_directories,
    listing_merges_keys_prefixes_and_rows_in_pages_without_shadowed_or_unshowable_names,
    a_directory_emptied_through_the_mount_stays_until_rmdir,
    mkdir_refuses_existing_names_and_rmdir_removes_an_s3_folder_marker,
    rename_of_a_file_replaces_a_file_and_moves_its_reference,
    rename_of_a_directory_moves_every_key_and_row_under_it,
    attributes_of_directories_and_files_change_in_the_catalog_only,
    persisted_time_is_recorded_when_a_content_becomes_persisted,
);
