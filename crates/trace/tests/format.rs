//! The trace format round-trips, detects its variants and rejects bad input with clear errors.

use permafrost_trace::{
    create_trace_file, hash_name, NextAccess, Op, Record, TraceFormat, TraceReader, TraceWriter,
};
use std::io::Cursor;

fn every_kind_of_record() -> Vec<Record> {
    vec![
        Record {
            user: 7,
            session: 3,
            path: Some("/a/b c.grib".into()),
            next_access: NextAccess::AtMs(900),
            ..Record::new(0, Op::Put, 1, 4096)
        },
        Record {
            next_access: NextAccess::Never,
            ..Record::new(5, Op::Get, 1, 4096)
        },
        Record {
            target: Some(u64::MAX),
            ..Record::new(6, Op::Rename, 1, 0)
        },
        Record::new(u64::MAX, Op::Del, u64::MAX, u64::MAX),
    ]
}

fn read_all(bytes: Vec<u8>) -> Result<Vec<Record>, permafrost_trace::TraceError> {
    TraceReader::from_reader(Box::new(Cursor::new(bytes)), "memory")?.collect()
}

#[test]
fn records_round_trip_through_the_text_format() {
    let records = every_kind_of_record();
    let mut writer = TraceWriter::new(Vec::new()).unwrap();
    for record in &records {
        writer.write(record).unwrap();
    }
    assert_eq!(writer.records_written(), 4);
    let bytes = writer.finish().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with("#permafrost-trace v1\n#fields\t"));
    assert!(
        text.contains("0\tPUT\t1\t4096\t7\t3\t900\t-\t/a/b c.grib\n"),
        "{text}"
    );
    assert_eq!(read_all(bytes).unwrap(), records);
}

#[test]
fn gzip_files_round_trip_and_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pft.gz");
    let records = every_kind_of_record();
    let mut writer = create_trace_file(&path).unwrap();
    for record in &records {
        writer.write(record).unwrap();
    }
    drop(writer.finish().unwrap());
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "compressed on disk");
    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.format(), TraceFormat::PermafrostV1);
    assert_eq!(reader.collect::<Result<Vec<_>, _>>().unwrap(), records);
}

#[test]
fn thesis_pipe_traces_are_detected_and_parsed() {
    let text = "\
1325462400|a1b2c3|h9f8e7|4711|PUT|/x/y.grib|52428800|12|ok|2
not a record line
1325462410|a1b2c3|h9f8e7|4711|GET|/x/y.grib|52428800|3|ok|-1
1325462420|a1b2c3|h9f8e7|4711|RENAME|/x/y.grib /x/z.grib|-|1||-1
";
    let mut reader =
        TraceReader::from_reader(Box::new(Cursor::new(text.as_bytes().to_vec())), "thesis")
            .unwrap();
    assert_eq!(reader.format(), TraceFormat::Thesis);
    let records: Vec<Record> = reader.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(reader.skipped_lines(), 1);
    assert_eq!(records.len(), 3);
    assert_eq!(
        (records[1].op, records[1].time_ms, records[1].size_bytes),
        (Op::Get, 10_000, 52_428_800)
    );
    assert_eq!(records[2].target, Some(hash_name("/x/z.grib")));
    assert!(records
        .iter()
        .all(|r| r.session == records[0].session && r.object == hash_name("/x/y.grib")));
}

#[test]
fn bad_lines_are_errors_that_name_the_line_and_the_field() {
    let cases = [
        (
            "#permafrost-trace v1\n1\tGET\t1\t2\t3\t4\t-\t-\n",
            "missing field path",
        ),
        (
            "#permafrost-trace v1\n1\tLIST\t1\t2\t3\t4\t-\t-\t-\n",
            "LIST",
        ),
        (
            "#permafrost-trace v1\n#c\nx\tGET\t1\t2\t3\t4\t-\t-\t-\n",
            "line 3: time_ms \"x\"",
        ),
        (
            "#permafrost-trace v1\n1\tRENAME\t1\t2\t3\t4\t-\t-\t-\n",
            "RENAME needs a target",
        ),
        (
            "#permafrost-trace v1\n1\tGET\t1\t2\t3\t4\tsoon\t-\t-\n",
            "next_ms",
        ),
        ("#permafrost-trace v2\n", "unsupported version"),
        ("hello world\n", "neither a permafrost trace header"),
    ];
    for (text, expected) in cases {
        let error = read_all(text.as_bytes().to_vec()).unwrap_err().to_string();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
}

#[test]
fn writer_refuses_records_that_would_break_the_format() {
    let mut writer = TraceWriter::new(Vec::new()).unwrap();
    let tab_path = Record {
        path: Some("a\tb".into()),
        ..Record::new(0, Op::Get, 1, 1)
    };
    assert!(writer
        .write(&tab_path)
        .unwrap_err()
        .to_string()
        .contains("tab"));
    let rename_without_target = Record::new(0, Op::Rename, 1, 1);
    assert!(writer.write(&rename_without_target).is_err());
    assert_eq!(writer.records_written(), 0);
}
