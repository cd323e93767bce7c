"""What older readers do with the files this version writes, proven with those readers
themselves: the schema package of the last 1.0, 1.1 and 1.2 commit, taken from this
repository's history, load them.

A 1.0 reader reads a later file that uses only 1.0 values (fields it does not know are
ignored); one with a 1.1 value (a bool key, an upper-case kernel name, a predicted
selection, compiled candidates) is refused with the field named, so a 1.0 reader skips it
and falls back, and never serves a predicted config as measured.  A file whose candidates
say which protocol timed them (1.2) and whether the timing was held (1.3) reads in all
three: what 1.2 and 1.3 add only describe timings every reader already takes.  An imported
file that names its upstream source (1.4) reads in the 1.3 reader, which ignores the source.  A 1.5
manifest, which names the kernel families its package serves, reads in the 1.4 reader
(the field ignored), and 1.5 artifacts are 1.4 artifacts.  A 1.6 package's manifest that
lists tables reads in the 1.5 reader, which ignores the tables and keeps the package's
artifacts; the 1.5 reader refuses a table file with its missing fields named, so it skips it.
A 1.8 table that keeps its upstream file's spelling reads in the 1.7 reader with the same rows,
the spelling ignored (and reported)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from factories import MI300X, artifact_dict, predicted_artifact_dict, staged_artifact_dict
from flyconfigs.schema import SCHEMA_VERSION, Artifact
from flyconfigs.schema.pack import folder_artifacts

ROOT = Path(__file__).resolve().parents[1]
READERS = {
    "1.0": "84ece000d2bfbd57130c9a73675a8bfc9c6bf726",  # flyconfigs-sm90 2026.12.3 was made with it
    "1.1": "2742b6c9c9ef1f2d4649c7ebf9384686162ff953",
    "1.2": "36957e62121d4013c4af7ca0c0eb20b15bd41fd0",
    "1.3": "b02f6ed1b1f3cde2c5c125250b9082ba283e2fd8",
    "1.4": "82578bf6e27968a0bf67245e1d13b066990ec1da",
    "1.5": "04462d14a8ffeb25804d2e752c885730ece3995b",
    "1.7": "9ec46e61c2b53c93a181636ec09dde663d0fa87a",
}
"""The last commit of each older schema minor."""

LOAD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from flyconfigs.schema.load import load_artifact
from flyconfigs.schema.models import SCHEMA_VERSION
assert SCHEMA_VERSION == sys.argv[2], SCHEMA_VERSION
out = {}
for path in sys.argv[3:]:
    try:
        load_artifact(path)
        out[path] = None
    except Exception as exc:
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def _reader(version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(ROOT), "archive", READERS[version], "flyconfigs", "schema"],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"the {version} reader's commit is not in this clone's history: {done.stderr.decode()[:200]}")
    folder = tmp_path_factory.mktemp(f"reader-{version}")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as archive:
        archive.extractall(folder, filter="tar")
    if not (folder / "flyconfigs" / "schema").exists():
        # From the 1.3 reader on, schema/ is a top-level folder that setuptools maps to
        # flyconfigs.schema: lay it out as a wheel installs it.
        (folder / "schema").rename(folder / "flyconfigs" / "schema")
    return folder


@pytest.fixture(scope="module")
def reader_1_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.0", tmp_path_factory)


@pytest.fixture(scope="module")
def reader_1_1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.1", tmp_path_factory)


@pytest.fixture(scope="module")
def reader_1_2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.2", tmp_path_factory)


@pytest.fixture(scope="module")
def reader_1_3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.3", tmp_path_factory)


@pytest.fixture(scope="module")
def reader_1_4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.4", tmp_path_factory)


@pytest.fixture(scope="module")
def reader_1_5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reader("1.5", tmp_path_factory)


def _read_with(reader: Path, version: str, files: dict[str, Path]) -> dict[str, str | None]:
    done = subprocess.run([sys.executable, "-c", LOAD, str(reader), version, *map(str, files.values())],
                          capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    by_path = json.loads(done.stdout)
    return {name: by_path[str(path)] for name, path in files.items()}


def _writer(folder: Path, files: dict[str, Path]):
    def put(name: str, data: dict) -> None:
        files[name] = folder / f"{name}.json"
        files[name].write_text(json.dumps(data))
    return put


def test_the_1_0_reader_reads_1_1_files_with_1_0_values_and_refuses_new_values(reader_1_0: Path,
                                                                              tmp_path: Path) -> None:
    files: dict[str, Path] = {}
    put = _writer(tmp_path, files)
    measured = next(a for a in folder_artifacts(ROOT / "artifacts" / "sm90", "fused_add_rmsnorm")
                    if a.schema_version == "1.1").model_dump(mode="json")
    assert measured["schema_version"] == "1.1"
    put("measured-1.1", measured)
    put("unknown-field", {**artifact_dict(), "schema_version": "1.1", "notes": "a field of a later minor"})
    put("bool-key", {**artifact_dict(), "schema_version": "1.1", "key": {"M": 4096, "N": 8192, "dtype": "bf16",
                                                                         "causal": True}})
    put("upper-case-kernel", {**artifact_dict(kernel="PagedAttention"), "schema_version": "1.1"})
    put("predicted", predicted_artifact_dict(device=MI300X))
    put("gfx942-package", folder_artifacts(ROOT / "artifacts" / "gfx942")[0].model_dump(mode="json"))

    seen = _read_with(reader_1_0, "1.0", files)
    assert seen["measured-1.1"] is None and seen["unknown-field"] is None
    assert "key.causal" in seen["bool-key"]
    assert "kernel.name" in seen["upper-case-kernel"]
    for name in ("predicted", "gfx942-package"):
        assert "selection.rule" in seen[name] and "status" in seen[name], seen[name]


def test_older_readers_read_1_3_files_and_ignore_how_each_candidate_was_timed(
        reader_1_0: Path, reader_1_1: Path, reader_1_2: Path, tmp_path: Path) -> None:
    files: dict[str, Path] = {}
    put = _writer(tmp_path, files)
    staged = {**staged_artifact_dict(), "schema_version": "1.3"}
    assert staged["provenance"]["timing_protocol"]["held"] is True
    put("staged", staged)
    put("staged-bool-key", {**staged, "key": {"M": 4096, "N": 8192, "dtype": "bf16", "causal": True}})
    put("staged-bad-timing", {**staged, "winner": {**staged["winner"], "timing": {**staged["winner"]["timing"],
                                                                                  "p20_us": 99.0}}})
    screened_winner = json.loads(json.dumps(staged))
    screened_winner["candidates"][0]["timed_in"] = "screen"
    put("screened-winner", screened_winner)

    by_1_2 = _read_with(reader_1_2, "1.2", files)
    assert by_1_2["staged"] is None and by_1_2["staged-bool-key"] is None
    assert "winner.timing.p20_us" in by_1_2["staged-bad-timing"]
    assert "candidates[0].timed_in" in by_1_2["screened-winner"]  # 1.2's own rule still holds
    by_1_1 = _read_with(reader_1_1, "1.1", files)
    assert by_1_1["staged"] is None and by_1_1["staged-bool-key"] is None
    assert "winner.timing.p20_us" in by_1_1["staged-bad-timing"]
    by_1_0 = _read_with(reader_1_0, "1.0", files)
    assert by_1_0["staged"] is None
    assert "key.causal" in by_1_0["staged-bool-key"]


def test_the_1_3_reader_reads_an_imported_1_4_file_and_ignores_its_source(reader_1_3: Path, tmp_path: Path) -> None:
    from flyconfigs.adapters.vllm import import_vllm_file

    files: dict[str, Path] = {}
    put = _writer(tmp_path, files)
    upstream = ROOT / "tests" / "data" / "upstream" / "vllm" / "E=128,N=384,device_name=AMD_Instinct_MI300X.json"
    imported = {**json.loads(import_vllm_file(upstream).artifacts[0].to_json_bytes()), "schema_version": "1.4"}
    assert "source" in imported["provenance"]
    put("imported", imported)
    put("measured-with-source", {**staged_artifact_dict(), "provenance": {**staged_artifact_dict()["provenance"],
                                                                          "source": imported["provenance"]["source"]}})
    seen = _read_with(reader_1_3, "1.3", files)
    assert seen["imported"] is None
    assert seen["measured-with-source"] is None  # 1.4's rule, unknown to 1.3: its reader drops the field


LOAD_MANIFEST = """
import json, sys
sys.path.insert(0, sys.argv[1])
from flyconfigs.schema.load import parse_manifest_report
from flyconfigs.schema.jsonio import read_document
from flyconfigs.schema.models import SCHEMA_VERSION
assert SCHEMA_VERSION == sys.argv[3], SCHEMA_VERSION
manifest, report = parse_manifest_report(read_document(sys.argv[2]), sys.argv[2])
print(json.dumps({"rows": len(manifest.artifacts), "ignored": list(report.ignored_fields)}))
"""


def test_the_1_4_reader_reads_1_5_manifests_and_artifacts(reader_1_4: Path, tmp_path: Path) -> None:
    from flyconfigs.publish.layout import package_files

    artifact = Artifact.model_validate(staged_artifact_dict())
    assert artifact.schema_version == SCHEMA_VERSION
    for rel, data in package_files("sm90", [artifact], "acme-sm90").items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    folder = tmp_path / "flyconfigs_data_acme_sm90"
    assert json.loads((folder / "manifest.json").read_text())["kernels"] == ["rmsnorm"]
    done = subprocess.run([sys.executable, "-c", LOAD_MANIFEST, str(reader_1_4), str(folder / "manifest.json"), "1.4"],
                          capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"rows": 1, "ignored": ["kernels"]}
    (row,) = json.loads((folder / "manifest.json").read_text())["artifacts"]
    assert _read_with(reader_1_4, "1.4", {"artifact": folder / row["file"]}) == {"artifact": None}


def test_the_1_5_reader_reads_a_package_with_tables_and_skips_the_tables(reader_1_5: Path, tmp_path: Path) -> None:
    from flyconfigs.publish.layout import package_files
    from flyconfigs.schema.table import Table
    from test_schema_table import table_dict

    artifact = Artifact.model_validate(staged_artifact_dict())
    table = Table.model_validate(table_dict())
    for rel, data in package_files("gfx942", [artifact], "acme-gfx942", tables=[table]).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    folder = tmp_path / "flyconfigs_data_acme_gfx942"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kernels"] == ["rmsnorm"] and len(manifest["tables"]) == 1
    done = subprocess.run([sys.executable, "-c", LOAD_MANIFEST, str(reader_1_5), str(folder / "manifest.json"), "1.5"],
                          capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"rows": 1, "ignored": ["tables"]}
    (row,) = manifest["artifacts"]
    seen = _read_with(reader_1_5, "1.5", {"artifact": folder / row["file"],
                                          "table": folder / manifest["tables"][0]["file"]})
    assert seen["artifact"] is None
    assert seen["table"] is not None and "candidates" in seen["table"] and "winner" in seen["table"]


LOAD_TABLE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.models import SCHEMA_VERSION
assert SCHEMA_VERSION == sys.argv[2], SCHEMA_VERSION
table, report = parse_table(json.load(open(sys.argv[3])), sys.argv[3])
print(json.dumps({"rows": table.rows, "entries": table.entries, "ignored": list(report.ignored_fields)}))
"""


def test_the_1_7_reader_reads_a_spelled_1_8_table_with_the_same_rows(tmp_path_factory: pytest.TempPathFactory,
                                                                     tmp_path: Path) -> None:
    from flyconfigs.adapters.aiter import import_aiter_file

    reader = _reader("1.7", tmp_path_factory)
    source = tmp_path / "a8w8_bpreshuffle_tuned_gemm.csv"
    source.write_bytes(b"gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName\r\n"
                       b"gfx942,304,1,1280,8192,torch.int8,asm,12,0,7.780,k12\r\n")  # CRLF; 7.780 is 7.78
    (table,) = import_aiter_file(source).tables
    assert table.schema_version == "1.8" and table.spelling is not None and table.spelling.newline == "\r\n"
    path = tmp_path / "table.json"
    path.write_bytes(table.to_json_bytes())
    done = subprocess.run([sys.executable, "-c", LOAD_TABLE, str(reader), "1.7", str(path)], capture_output=True,
                          text=True, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"rows": json.loads(json.dumps(table.rows)), "entries": table.entries,
                                       "ignored": ["spelling"]}


def test_the_1_7_reader_reads_a_manifest_with_a_kept_table_and_ignores_it(tmp_path_factory: pytest.TempPathFactory,
                                                                          tmp_path: Path) -> None:
    from flyconfigs.adapters.aiter import import_aiter_file
    from flyconfigs.publish.layout import package_files

    reader = _reader("1.7", tmp_path_factory)
    source = tmp_path / "chunk_gdn_h_opt_tuned.csv"
    source.write_text("gfx,cu_num,dtype,K,V,BT,H,Hg,is_varlen,use_h0,store_fs,snapshot_bf16,state_bf16,T_flat,N,"
                      "total_chunks,max_seq_chunks,BV,us\n")  # aiter ships it with its header alone
    kept = [t for t in import_aiter_file(source).tables if t.device.arch == "gfx942"]
    artifact = Artifact.model_validate(staged_artifact_dict())
    for rel, data in package_files("gfx942", [artifact], "acme-gfx942", tables=kept).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    manifest = tmp_path / "flyconfigs_data_acme_gfx942" / "manifest.json"
    assert [k["rows"] for k in json.loads(manifest.read_text())["kept"]] == [0]
    done = subprocess.run([sys.executable, "-c", LOAD_MANIFEST, str(reader), str(manifest), "1.7"],
                          capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"rows": 1, "ignored": ["kept"]}
