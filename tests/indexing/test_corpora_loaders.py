"""Loaders of the real formats, on fixture files the project writes itself in those formats."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexing.corpora.enron import EXTRA_SCHEMA, iter_enron
from indexing.corpora.esci import iter_esci
from indexing.corpora.files import arrow_schema, corpus_manifest, iter_corpus, write_corpus
from indexing.corpora.fixtures import write_enron_fixture, write_esci_fixture
from indexing.corpora.loading import LoadStats
from indexing.corpora.products import generate_products
from indexing.errors import CorpusError
from indexing.schema import EMAILS, PRODUCTS
from indexing.workspace import Workspace


def _load(batches: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pa.concat_tables(list(batches)).to_pylist()
    return rows


def _mail(
    maildir: Path, rel: str, body: str = "Here is our forecast.\n", *, crlf: bool = False, **headers: str
) -> None:
    """Write one message as the Enron release does: plain headers, ``X-`` fields, a text body.

    ``headers`` override the defaults (``Message_ID`` stands for ``Message-ID``); an empty value drops one.
    """
    fields = {
        "Message-ID": f"<{rel.replace('/', '.')}.JavaMail.evans@thyme>",
        "Date": "Mon, 14 May 2001 16:39:00 -0700 (PDT)",
        "From": "phillip.allen@enron.com",
        "To": "tim.belden@enron.com",
        "Subject": "Forecast",
        "Mime-Version": "1.0",
        "Content-Type": "text/plain; charset=us-ascii",
        "Content-Transfer-Encoding": "7bit",
        "X-From": "Phillip K Allen",
        "X-Origin": "Allen-P",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    text = "".join(f"{k}: {v}\n" for k, v in fields.items() if v) + "\n" + body
    path = maildir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.replace("\n", "\r\n").encode() if crlf else text.encode())


def test_esci_round_trip(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=12, seed=4)
    stats = LoadStats()
    tables = list(iter_esci(fx.products, fx.reviews, fx.meta, stats=stats, chunk_rows=4))
    assert all(t.schema.equals(arrow_schema(PRODUCTS)) for t in tables)
    rows = pa.concat_tables(tables).to_pylist()
    assert [r["id"] for r in rows] == [f"P{k:05d}" for k in range(1, 11)]
    assert stats.rows == 10 and dict(stats.dropped) == {"no_price": 1, "no_reviews": 1} and stats.read == 12
    assert stats.extras is not None
    assert stats.extras.column("id").to_pylist() == [r["id"] for r in rows]
    assert stats.extras.column("asin").to_pylist() == list(fx.asins[:10])
    assert stats.extras.column("parent_asin").to_pylist()[:2] == ["B100000000", fx.asins[1]]
    source = {d["title"]: d for d in fx.source.to_pylist()}
    for r in rows:
        d = source[r["title"]]
        for name in ("brand", "category", "price", "rating", "review_count", "color", "release_date"):
            assert r[name] == d[name], name
        assert r["in_stock"] is True
        assert d["description"] in r["description"] and "<p>" not in r["description"]
        assert d["review"] in r["review"]  # the most helpful of the product's reviews
        assert r["title"] in r["image"] and d["color"] in r["image"]


def test_esci_limit_gzip_and_missing_meta(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=8)
    packed = tmp_path / "Electronics.jsonl.gz"
    with fx.reviews.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    rows = _load(iter_esci(fx.products, packed, fx.meta, limit=3))
    assert [r["id"] for r in rows] == ["P00001", "P00002", "P00003"]
    with pytest.raises(CorpusError) as err:
        _load(iter_esci(fx.products, fx.reviews))
    assert err.value.code == "empty_load" and "--meta" in err.value.message
    with pytest.raises(CorpusError) as err:
        iter_esci(fx.products, fx.reviews, fx.meta, limit=0)
    assert err.value.code == "bad_argument"


def test_esci_counts_only_the_duplicates_it_reads_within_the_limit(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=8)
    table = pq.read_table(fx.products)
    listed = pa.concat_tables([table.slice(0, 2), table.slice(0, 1), table.slice(2), table.slice(5, 1)])
    pq.write_table(listed, fx.products)  # product 0 again after the second row; product 5 again at the end
    stats = LoadStats()
    rows = _load(iter_esci(fx.products, fx.reviews, fx.meta, limit=3, stats=stats))
    assert (
        len(rows) == 3 and stats.dropped["duplicate_product"] == 1
    )  # the repeat at the end is past the limit
    stats = LoadStats()
    _load(iter_esci(fx.products, fx.reviews, fx.meta, stats=stats))
    assert stats.dropped["duplicate_product"] == 2


@pytest.mark.parametrize("kind", ["json", "field", "column"])
def test_broken_esci_names_file_and_line_and_keeps_previous_corpus(tmp_path: Path, kind: str) -> None:
    ws = Workspace(tmp_path / "ws")
    before = write_corpus(ws, PRODUCTS, generate_products(40, seed=1), {"source": "generated"})
    fx = write_esci_fixture(tmp_path / "src", n=10, broken=kind)
    with pytest.raises(CorpusError) as err:
        write_corpus(ws, PRODUCTS, iter_esci(fx.products, fx.reviews, fx.meta), {"source": "esci"})
    assert fx.broken_at is not None and fx.broken_at in err.value.message
    assert err.value.code == "bad_record"
    assert "\n" not in err.value.one_line()
    assert corpus_manifest(ws, "ecommerce") == before
    assert sum(t.num_rows for t in iter_corpus(ws, PRODUCTS)) == 40


def test_missing_source_files_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as err:
        _load(iter_esci(tmp_path / "nope.parquet", tmp_path / "r.jsonl"))
    assert err.value.code == "bad_source" and "nope.parquet" in err.value.message
    (tmp_path / "not.parquet").write_text("hello")
    with pytest.raises(CorpusError):
        _load(iter_esci(tmp_path / "not.parquet", tmp_path / "r.jsonl"))
    with pytest.raises(CorpusError) as err:
        _load(iter_enron(tmp_path / "no-maildir"))
    assert err.value.code == "bad_source"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError):
        _load(iter_enron(tmp_path / "empty"))


def test_enron_round_trip(tmp_path: Path) -> None:
    fx = write_enron_fixture(tmp_path, n=40, seed=9)
    stats = LoadStats()
    rows = _load(iter_enron(fx.maildir, stats=stats, chunk_rows=16))
    assert len(rows) == 40 == stats.rows
    assert [r["id"] for r in rows] == [f"E{k:05d}" for k in range(1, 41)]
    source = fx.source.to_pylist()
    by_key = {(d["sender"], d["date"]): (d, flagged) for d, flagged in zip(source, fx.flagged, strict=True)}
    assert any(fx.flagged) and not all(fx.flagged)
    for r in rows:
        d, flagged = by_key[(r["sender"], r["date"])]
        for name in ("sender_domain", "recipient", "folder", "subject", "has_attachment"):
            assert r[name] == d[name], name
        assert r["body"].startswith(d["body"])
        assert r["is_read"] == (d["is_read"] and flagged)
        assert r["is_starred"] == (d["is_starred"] and flagged)
    loaded_threads = {(r["sender"], r["date"]): r["thread_id"] for r in rows}
    groups: dict[str, set[str]] = defaultdict(set)
    for d in source:
        groups[d["thread_id"]].add(loaded_threads[(d["sender"], d["date"])])
    assert all(len(ids) == 1 for ids in groups.values())  # a thread keeps one id through "Re:" subjects
    assert len({next(iter(ids)) for ids in groups.values()}) == len(
        {d["subject"].removeprefix("Re: ") for d in source}
    )
    assert _load(iter_enron(fx.maildir, limit=5)) == rows[:5]


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("date", "unparsable Date header"),
        ("charset", "unknown charset"),
        ("headers", "not an RFC 822 message"),
    ],
)
def test_broken_enron_names_the_message_and_keeps_previous_corpus(
    tmp_path: Path, kind: str, says: str
) -> None:
    ws = Workspace(tmp_path / "ws")
    good = write_enron_fixture(tmp_path / "good", n=6)
    before = write_corpus(ws, EMAILS, iter_enron(good.maildir), {"source": "enron"})
    fx = write_enron_fixture(tmp_path / "bad", n=6, broken=kind)
    with pytest.raises(CorpusError) as err:
        write_corpus(ws, EMAILS, iter_enron(fx.maildir), {"source": "enron"})
    assert str(fx.maildir / str(fx.broken_at)) in err.value.message and says in err.value.message
    assert err.value.code == "bad_record"
    assert corpus_manifest(ws, "email") == before
    assert sum(t.num_rows for t in iter_corpus(ws, EMAILS)) == 6
    assert not (ws.root / "corpora" / "email.partial").exists()


def test_attachment_markers_of_notes_and_outlook_and_mime_parts(tmp_path: Path) -> None:
    md = tmp_path / "maildir"
    _mail(md, "allen-p/inbox/1.", "Please fill in the form.\n\n << File: Badge Access Form.doc >> \n")
    _mail(md, "allen-p/inbox/2.", "Numbers attached.\n\n<<Q2 forecast.xls>>\n")
    _mail(md, "allen-p/inbox/3.", "See the chart.\n\n << OLE Object: Picture (Metafile) >> \n")
    _mail(md, "allen-p/inbox/4.", "Shift left: a << b >> c.\n")
    mime = (
        "--b\nContent-Type: text/plain\n\nSigned copy.\n"
        '--b\nContent-Type: application/pdf\nContent-Disposition: attachment; filename="deal.pdf"\n\n%PDF\n--b--\n'
    )
    _mail(
        md,
        "allen-p/inbox/5.",
        mime,
        Content_Type='multipart/mixed; boundary="b"',
        Content_Transfer_Encoding="",
    )
    rows = _load(iter_enron(md))
    assert [r["has_attachment"] for r in rows] == [True, True, False, False, True]
    assert rows[4]["body"] == "Signed copy."


def test_release_root_is_refused_naming_the_maildir(tmp_path: Path) -> None:
    release = tmp_path / "enron_mail_20150507"
    _mail(release / "maildir", "allen-p/_sent_mail/1.")
    with pytest.raises(CorpusError) as err:
        _load(iter_enron(release))
    assert err.value.code == "maildir_root"
    assert str(release / "maildir") in err.value.message and "\n" not in err.value.one_line()
    assert _load(iter_enron(release / "maildir"))[0]["folder"] == "_sent_mail"


def test_a_folder_named_tmp_is_mail_and_a_maildirs_tmp_is_not(tmp_path: Path) -> None:
    _mail(tmp_path, "allen-p/tmp/1.")  # a user's folder called tmp
    _mail(tmp_path, "allen-p/inbox/1.")
    for box in ("cur", "new", "tmp"):  # a Maildir: tmp/ holds half-delivered messages
        _mail(tmp_path, f"beck-s/mail/{box}/1.")
    rows = _load(iter_enron(tmp_path))
    assert sorted(r["folder"] for r in rows) == [
        "inbox",
        "mail",
        "mail",
        "tmp",
    ]  # cur/ and new/ are the folder "mail"


def test_crlf_bodies_get_newlines(tmp_path: Path) -> None:
    md = tmp_path / "maildir"
    _mail(md, "allen-p/inbox/1.", "Tim,\n\nHere is our forecast.\nPhillip\n", crlf=True, Subject="Forecast")
    _mail(md, "allen-p/inbox/2.", "Old Mac text.\rSecond line.\r")
    rows = _load(iter_enron(md))
    assert [r["body"] for r in rows] == [
        "Tim,\n\nHere is our forecast.\nPhillip",
        "Old Mac text.\nSecond line.",
    ]
    assert rows[0]["subject"] == "Forecast" and rows[0]["recipient"] == "tim.belden@enron.com"


def test_dates_keep_the_senders_wall_clock_and_the_placeholder_is_dropped(tmp_path: Path) -> None:
    md = tmp_path / "maildir"
    _mail(md, "allen-p/inbox/1.", Date="Fri, 29 Dec 2000 17:05:00 -0800 (PST)")  # 01:05 on the 30th in UTC
    _mail(md, "allen-p/inbox/2.", Date="Mon, 31 Dec 1979 16:00:00 -0800 (PST)")  # Enron's "no date"
    _mail(md, "allen-p/inbox/3.", Date="Sun, 31 Dec 2000 20:00:00 -0800")  # 2001 in UTC
    _mail(md, "allen-p/inbox/4.", Date="Mon, 1 Jan 2001 09:30:00 +0100")  # 2000 in UTC
    _mail(md, "allen-p/inbox/5.", Date="Tue, 2 Jan 2001 09:30:00 -0000")
    stats = LoadStats()
    rows = _load(iter_enron(md, stats=stats))
    assert [r["date"] for r in rows] == [
        datetime(2000, 12, 29, 17, 5),
        datetime(2000, 12, 31, 20, 0),
        datetime(2001, 1, 1, 9, 30),
        datetime(2001, 1, 2, 9, 30),
    ]
    assert [r["id"] for r in rows] == ["E00001", "E00002", "E00003", "E00004"]
    assert stats.rows == 4 and dict(stats.dropped) == {"placeholder_date": 1}
    assert _load(iter_enron(md, limit=2)) == rows[:2]  # the limit counts loaded rows
    for k in (1, 3, 4, 5):
        (md / f"allen-p/inbox/{k}.").unlink()
    with pytest.raises(CorpusError) as err:
        _load(iter_enron(md))
    assert err.value.code == "empty_load" and "placeholder_date: 1" in err.value.message


def test_recipient_is_the_first_to_else_cc_else_bcc_and_every_address_is_kept(tmp_path: Path) -> None:
    md = tmp_path / "maildir"
    many = "Tim Belden <tim.belden@enron.com>, john.arnold@enron.com,\n\tmike.grigsby@enron.com"
    _mail(md, "allen-p/inbox/1.", To=many, Cc="Sally.Beck@enron.com", Bcc="sally.beck@enron.com")
    _mail(md, "allen-p/inbox/2.", To="", Cc="Keith.Holst@enron.com, frank.ermis@enron.com")
    _mail(md, "allen-p/inbox/3.", To="", Bcc="jane.tholt@enron.com")
    _mail(md, "allen-p/inbox/4.", To="")
    stats = LoadStats()
    rows = _load(iter_enron(md, stats=stats))
    assert [r["recipient"] for r in rows] == [
        "tim.belden@enron.com",
        "keith.holst@enron.com",
        "jane.tholt@enron.com",
        "",
    ]
    assert dict(stats.derived) == {
        "recipient_from_cc": 1,
        "recipient_from_bcc": 1,
        "recipients_not_indexed": 2,
    }
    assert stats.extras is not None and stats.extras.schema.equals(EXTRA_SCHEMA)
    extras = stats.extras.to_pylist()
    assert [e["id"] for e in extras] == [r["id"] for r in rows]
    assert [(e["to"], e["cc"], e["bcc"]) for e in extras] == [
        (
            ["tim.belden@enron.com", "john.arnold@enron.com", "mike.grigsby@enron.com"],
            ["sally.beck@enron.com"],
            ["sally.beck@enron.com"],
        ),
        ([], ["keith.holst@enron.com", "frank.ermis@enron.com"], []),
        ([], [], ["jane.tholt@enron.com"]),
        ([], [], []),
    ]
    assert extras[0]["message_id"] == "<allen-p.inbox.1..JavaMail.evans@thyme>"


def test_copies_in_notes_views_are_dropped_unless_kept(tmp_path: Path) -> None:
    md = tmp_path / "maildir"
    _mail(md, "allen-p/all_documents/1.", Message_ID="<1.JavaMail.evans@thyme>", Subject="Forecast")
    _mail(md, "allen-p/discussion_threads/1.", Message_ID="<2.JavaMail.evans@thyme>", Subject="Gas")
    _mail(md, "allen-p/inbox/10.", Message_ID="<1.JavaMail.evans@thyme>", Subject="Forecast")
    _mail(md, "allen-p/california/2.", Message_ID="<3.JavaMail.evans@thyme>", Subject="Rates")
    _mail(md, "allen-p/notes_inbox/7.", Message_ID="<3.JavaMail.evans@thyme>", Subject="Rates")
    _mail(md, "allen-p/sent/3.", Message_ID="<2.JavaMail.evans@thyme>", Subject="Gas")
    _mail(md, "allen-p/sent/4.", Message_ID="", Subject="No id")  # never merged
    _mail(md, "allen-p/all_documents/4.", Message_ID="", Subject="No id")
    _mail(md, "arnold-j/inbox/1.", Message_ID="<3.JavaMail.evans@thyme>", Subject="Rates")
    stats = LoadStats()
    rows = _load(iter_enron(md, stats=stats))
    assert [(r["folder"], r["subject"]) for r in rows] == [
        ("inbox", "Forecast"),
        ("sent", "Gas"),
        ("sent", "No id"),
        ("california", "Rates"),
        ("all_documents", "No id"),
    ]
    assert [r["id"] for r in rows] == [f"E0000{k}" for k in range(1, 6)]
    assert dict(stats.dropped) == {"duplicate_message": 4} and stats.read == 9
    assert stats.extras is not None
    assert [(e["message_id"], e["copies"]) for e in stats.extras.to_pylist()] == [
        ("<1.JavaMail.evans@thyme>", ["allen-p/inbox", "allen-p/all_documents"]),
        ("<2.JavaMail.evans@thyme>", ["allen-p/sent", "allen-p/discussion_threads"]),
        ("", ["allen-p/sent"]),
        ("<3.JavaMail.evans@thyme>", ["allen-p/california", "allen-p/notes_inbox", "arnold-j/inbox"]),
        ("", ["allen-p/all_documents"]),
    ]
    kept = LoadStats()
    every = _load(iter_enron(md, keep_duplicates=True, stats=kept))
    assert kept.extras is not None and kept.extras.column("copies").to_pylist()[4] == [
        "allen-p/california",
        "allen-p/notes_inbox",
        "arnold-j/inbox",
    ]
    assert [r["folder"] for r in every] == [
        "inbox",
        "sent",
        "sent",
        "california",
        "notes_inbox",
        "discussion_threads",
        "all_documents",
        "all_documents",
        "inbox",
    ]


def test_git_lfs_pointers_say_to_pull(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=5)
    pointer = (
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        "size 1048153409\n"
    )
    for kind in ("products", "reviews", "meta"):
        stub = tmp_path / f"{kind}.pointer"
        stub.write_text(pointer)
        args = {"products": fx.products, "reviews": fx.reviews, "meta": fx.meta, kind: stub}
        with pytest.raises(CorpusError) as err:
            _load(iter_esci(args["products"], args["reviews"], args["meta"]))
        assert err.value.code == "lfs_pointer", kind
        assert str(stub) in err.value.message and "git lfs pull" in err.value.message
        assert "\n" not in err.value.one_line()


def test_the_examples_file_given_as_products_is_named(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=5)
    examples = tmp_path / "shopping_queries_dataset_examples.parquet"
    row = {
        "example_id": 0,
        "query": " revent 80 cfm",
        "query_id": 0,
        "product_id": "B000MOO21W",
        "product_locale": "us",
        "esci_label": "I",
        "small_version": 0,
        "large_version": 1,
        "split": "train",
    }
    pq.write_table(pa.Table.from_pylist([row]), examples)
    with pytest.raises(CorpusError) as err:
        _load(iter_esci(examples, fx.reviews, fx.meta))
    assert err.value.code == "examples_file"
    assert (
        "examples file" in err.value.message
        and "shopping_queries_dataset_products.parquet" in err.value.message
    )


def test_empty_join_hint_follows_the_reason(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=5)
    strangers = tmp_path / "Books.jsonl"
    strangers.write_text(fx.reviews.read_text().replace('"B0', '"X0').replace('"B1', '"X1'))
    for meta in (None, fx.meta):
        with pytest.raises(CorpusError) as err:
            _load(iter_esci(fx.products, strangers, meta))
        assert err.value.code == "empty_load" and "no_reviews: 5" in err.value.message
        assert "--meta" not in err.value.message and "pass the reviews of their category" in err.value.message
    no_prices = tmp_path / "meta_no_price.jsonl"
    no_prices.write_text(fx.meta.read_text().replace('"price": ', '"was": '))
    with pytest.raises(CorpusError) as err:
        _load(iter_esci(fx.products, fx.reviews, no_prices))
    assert "no_price: 4" in err.value.message and f"{no_prices} has no price" in err.value.message
    assert "--meta" not in err.value.message and "reviews of their category" not in err.value.message


def test_colors_are_color_words_or_unspecified(tmp_path: Path) -> None:
    fx = write_esci_fixture(tmp_path, n=9)
    raw = [
        "0",
        "dvd",
        "multi",
        "Standard 3GB+32GB (S-DIN 8inch)",
        "Navy Blue",
        "Space Grey",
        "YELLOW",
        "x",
        "x",
    ]
    table = pq.read_table(fx.products)
    by_asin = dict(zip(fx.asins, raw, strict=True))
    colors = [by_asin[a] for a in table.column("product_id").to_pylist()]
    pq.write_table(
        table.set_column(table.schema.get_field_index("product_color"), "product_color", pa.array(colors)),
        fx.products,
    )
    metas = [json.loads(line) for line in fx.meta.read_text().splitlines()]
    for k, m in enumerate(metas):
        m["details"]["Color"] = "Blue" if k == 3 else "Multicolor" if k == 0 else None
    fx.meta.write_text("".join(json.dumps(m) + "\n" for m in metas))
    stats = LoadStats()
    rows = _load(iter_esci(fx.products, fx.reviews, fx.meta, stats=stats))
    assert [r["color"] for r in rows] == ["unspecified"] * 3 + ["blue", "navy", "gray", "yellow"]
    assert rows[0]["image"] == f"product photo of {rows[0]['title']}"
    assert rows[4]["image"] == f"product photo of a navy {rows[4]['title']}"
    assert stats.derived["color_not_a_color"] == 3
