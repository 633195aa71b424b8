"""Great Expectations gates: suites versioned as JSON under ``expectations/``, run on Spark DataFrames.

Suites:
    reconciliation_diff  -- on the reconciliation diff table: every status is ``match`` or ``in_flight``, key not
                            null, (table_id, epoch_no, key) unique. A failing suite names the offending statuses.
    latest_state         -- a template for published latest-state tables: key columns not null and (compound)
                            unique. :func:`validate_latest_state` fills in each table's key columns.

Suite files are GX 1.x suite JSON (``name``, ``expectations: [{type, kwargs, meta}]``, ``meta``, ``notes``) with two
template conventions (see ``expectations/README.md``): a kwargs value ``"$name"`` is replaced by the parameter
``name``; an expectation whose ``meta.cdcreplay_for_each`` is ``{"var": "list_param"}`` is repeated once per item of
the list parameter, with ``"$var"`` bound to the item. ``expect_compound_columns_to_be_unique`` with a single column
(GX requires two or more) becomes ``expect_column_values_to_be_unique``.

A small frame whose suite both of GX's engines answer alike is collected and validated by GX's pandas engine on the
driver (:data:`LOCAL_MAX_ROWS`, :func:`_validated_locally`); every other frame by GX's Spark engine.

Each run uses an ephemeral GX context (nothing is written to a ``gx/`` project folder). When a Data Docs folder is
given, the context's expectation and validation-result stores are files under ``<data_docs_dir>/_gx/`` and the site
is built into ``<data_docs_dir>`` itself, so successive runs into the same folder (the diff suite, then one
latest-state suite per table, possibly from other processes) all appear in one ``index.html``.

``import great_expectations`` takes seconds (8-15 s on the 2-core machines here), so it is imported inside the functions
that need it, and a run that will need it starts the import early with :func:`import_in_background`: the driver's
Python is idle while Spark decodes and compacts in the JVM, so the import overlaps with that work.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cdcreplay.spark import limits_use_every_core, vectorized_parquet_reads

SUITE_RECONCILIATION_DIFF = "reconciliation_diff"
SUITE_LATEST_STATE = "latest_state"
# Frames of at least this many rows are cached clustered by their uniqueness check's key (_clustered_for_uniqueness).
# Measured: the 5M-row reconciliation diff's suite took 11.4 s instead of 17-21 s, a 3M-row table's 3.1 s instead of
# 3.7 s; but 20 tables of 1,000 rows took ~0.2 s more each (one more job per table to compute the cache first).
CLUSTERED_CACHE_MIN_ROWS = 1_000_000
# Frames of at most this many rows, whose suite only has checks that both of GX's engines answer alike, on columns of
# types both read alike, are collected to the driver and validated by GX's pandas engine (see _validated_locally):
# one Spark job instead of one per metric (about a dozen for a table's latest_state suite).
LOCAL_MAX_ROWS = 100_000
# GX's Spark and pandas engines give the same results for these, the checks of the shipped suites (compared in
# tests/test_quality.py, NULLs, NaN, integers beyond 2^53, decimals, binary and dates included) ...
_ENGINE_NEUTRAL_EXPECTATIONS = frozenset(
    {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_unique",
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_be_in_set",
    }
)
# ... on columns of these Spark types, read through Arrow into pandas' Arrow-backed columns (so a NULL integer stays
# an exact integer, and NaN stays a value, not a NULL, as in Spark). Timestamps are left to Spark: pandas renders
# them with their UTC offset, Spark in the session's time zone.
_LOCAL_TYPE_NAMES = frozenset(
    {"string", "byte", "short", "integer", "long", "boolean", "decimal", "date", "binary", "float", "double"}
)
_PARAMETER = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


def import_in_background() -> None:
    """Start importing great_expectations in a daemon thread, once per process; the first use then finds it loaded
    (or waits for the rest of the import: Python's import lock makes a concurrent ``import`` wait, not import twice).
    A failed import is left for that first use to report."""
    global _importer
    with _importer_lock:
        if _importer is None:
            _importer = threading.Thread(target=_import_quietly, name="import-great-expectations", daemon=True)
            _importer.start()


def _import_quietly() -> None:
    with contextlib.suppress(Exception):  # a failure shows again, with its traceback, where GX is used
        importlib.import_module("great_expectations")


_importer: threading.Thread | None = None
_importer_lock = threading.Lock()


def default_expectations_dir() -> Path:
    """``$CDCREPLAY_EXPECTATIONS_DIR``, else the repository's ``expectations/`` folder."""
    configured = os.environ.get("CDCREPLAY_EXPECTATIONS_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "expectations"


@dataclass
class SuiteResult:
    suite_name: str
    success: bool
    # One line per failed expectation: "<type>(<column(s)>): <n> unexpected of <m> [values]" or "...: error: ...".
    failed: list[str] = field(default_factory=list)
    statistics: dict = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    data_docs_index: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------------------------
# Suite files
# --------------------------------------------------------------------------------------------------------------------


def suite_path(suite_name: str, expectations_dir: Path | str | None = None) -> Path:
    return Path(expectations_dir or default_expectations_dir()) / f"{suite_name}.json"


def load_suite_config(suite_name: str, expectations_dir: Path | str | None = None) -> dict:
    path = suite_path(suite_name, expectations_dir)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"expectation suite {suite_name!r} not found: {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(config.get("expectations"), list):
        raise ValueError(f"{path}: field 'expectations' must be a list of {{type, kwargs}} objects")
    config["_path"] = str(path)
    return config


def _substitute(value: Any, parameters: dict, where: str) -> Any:
    if isinstance(value, str):
        match = _PARAMETER.match(value)
        if match:
            if match.group(1) not in parameters:
                raise ValueError(f"{where}: parameter ${match.group(1)} is not given (have: {sorted(parameters)})")
            return copy.deepcopy(parameters[match.group(1)])
        return value
    if isinstance(value, list):
        return [_substitute(item, parameters, where) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, parameters, where) for key, item in value.items()}
    return value


def render_expectations(config: dict, parameters: dict | None = None) -> list[dict]:
    """The suite's expectations with template parameters filled in (see module docstring)."""
    parameters = parameters or {}
    where = config.get("_path", config.get("name", "suite"))
    rendered = []
    for index, expectation in enumerate(config["expectations"]):
        if not isinstance(expectation, dict) or "type" not in expectation:
            raise ValueError(f"{where}: expectation #{index} needs a 'type' (and 'kwargs')")
        meta = dict(expectation.get("meta") or {})
        for_each = meta.get("cdcreplay_for_each") or {}
        if len(for_each) > 1:
            raise ValueError(f"{where}: expectation #{index}: cdcreplay_for_each takes one variable")
        if for_each:
            ((variable, source),) = for_each.items()
            items = parameters.get(source)
            if not isinstance(items, list | tuple):
                raise ValueError(f"{where}: expectation #{index} repeats over ${source}, which must be given as a list")
            bindings = [{**parameters, variable: item} for item in items]
        else:
            bindings = [parameters]
        for binding in bindings:
            kwargs = _substitute(expectation.get("kwargs") or {}, binding, f"{where}: expectation #{index}")
            kind = expectation["type"]
            columns = kwargs.get("column_list")
            if kind == "expect_compound_columns_to_be_unique" and isinstance(columns, list) and len(columns) == 1:
                kind, kwargs = (
                    "expect_column_values_to_be_unique",
                    {
                        **{k: v for k, v in kwargs.items() if k != "column_list"},
                        "column": columns[0],
                    },
                )
            rendered.append({"type": kind, "kwargs": kwargs, "meta": meta})
    return rendered


# --------------------------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------------------------


def _context(data_docs_dir: Path | None):
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )
    if data_docs_dir is not None:
        store_root = Path(data_docs_dir) / "_gx"
        _drop_half_written_store_files(store_root)
        for store_name, folder in (
            (config.expectations_store_name, "expectations"),
            (config.validation_results_store_name, "validations"),
        ):
            config.stores[store_name]["store_backend"] = {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(store_root / folder),
            }
        config.data_docs_sites = {
            "local_site": {
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(data_docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        }
    return gx.get_context(mode="ephemeral", project_config=config)


def _drop_half_written_store_files(store_root: Path) -> None:
    """Remove the store files (suites, validation results) that a killed run left empty or cut short.

    GX writes a store file in place, not through a temporary file: a run killed by SIGKILL (or a lost node) in the
    middle of a write leaves it half written, and every later validation into the same folder -- the re-run of that
    run id -- then fails reading it. A store file only records what a validation wrote; the next one writes it again.
    """
    for path in store_root.rglob("*.json") if store_root.is_dir() else ():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            document = None
        if not isinstance(document, dict):
            path.unlink(missing_ok=True)


def _build_suite(name: str, config: dict, expectations: list[dict]):
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    where = config.get("_path", name)
    objects = []
    for index, expectation in enumerate(expectations):
        try:
            objects.append(ExpectationConfiguration(**expectation).to_domain_obj())
        except Exception as error:  # GX raises pydantic / its own errors; name the file and expectation instead
            raise ValueError(f"{where}: expectation #{index} {expectation['type']} is invalid: {error}") from None
    return gx.ExpectationSuite(name=name, expectations=objects, meta=config.get("meta"), notes=config.get("notes"))


def _value_text(value: Any) -> str:
    if isinstance(value, list | tuple):  # compound expectations report a tuple of column values
        return "(" + ", ".join(map(str, value)) + ")"
    return str(value)


def _describe_failure(kind: str, kwargs: dict, result: dict, exception: dict | None) -> str:
    if "column" in kwargs:
        domain = f"column={kwargs['column']}"
    elif "column_list" in kwargs:
        domain = f"columns={','.join(map(str, kwargs['column_list']))}"
    else:
        domain = ""
    head = f"{kind}({domain})"
    if exception and exception.get("raised_exception"):
        return f"{head}: error: {exception.get('exception_message')}"
    unexpected = result.get("unexpected_count")
    if unexpected is None:
        observed = result.get("observed_value")
        return f"{head}: failed (observed {observed!r})"
    text = f"{head}: {unexpected} unexpected of {result.get('element_count')}"
    counts = [item for item in result.get("partial_unexpected_counts") or [] if item.get("value") is not None]
    if counts:
        listed = ", ".join(f"{_value_text(item['value'])}: {item['count']}" for item in counts[:10])
        # GX counts the values of its sample of failing rows (the first 20 it meets, in no set order), not of all of
        # them: say so when the sample is not all of them, so the figures are not read as totals.
        sampled = sum(int(item.get("count") or 0) for item in result.get("partial_unexpected_counts") or [])
        text += f" ({listed})" if sampled >= unexpected else f" (in a sample of {sampled}: {listed})"
    return text


def _safe(name: str) -> str:
    """``name`` as a GX store key: GX files a suite named ``a.b`` as ``a/b.json``, so an empty part (a table id
    such as ``.`` or ``a..b``) gets a name too, else two names could share one file."""
    return ".".join(part or "_" for part in _SAFE_NAME.sub("_", name).split("."))


@dataclass(frozen=True)
class Validation:
    """A Spark DataFrame ``df`` to validate with ``<expectations_dir>/<suite_name>.json`` (see :func:`run_suite`
    for the other fields). ``rows``: about how many rows ``df`` has, when the caller knows (see
    :data:`CLUSTERED_CACHE_MIN_ROWS`)."""

    df: Any
    suite_name: str
    parameters: dict | None = None
    suite_label: str | None = None
    asset_name: str | None = None
    run_name: str | None = None
    rows: int | None = None

    @property
    def clustered(self) -> bool:
        return self.rows is not None and self.rows >= CLUSTERED_CACHE_MIN_ROWS


@dataclass(frozen=True)
class _Registered:
    """A validation added to the runner's context: its suite's label, GX's validation definition, the frame it
    reads (narrowed, clustered), whether GX's pandas engine validates it on the driver, and the validation asked
    for."""

    label: str
    definition: Any
    df: Any
    local: bool
    validation: Validation


# A small frame's suite is a dozen small Spark jobs, so its time is the driver's latency between them: several run at
# once (Spark runs concurrent jobs from several threads). A large frame's suite is bound by its scans: those run one
# after the other, each cached while it is checked.
VALIDATIONS_AT_ONCE = 4


class SuiteRunner:
    """Validations that share one GX context, and with it one Data Docs site built once, at the end.

    A run audits every table it typed: one context per table would build the context again per table, and re-render
    the Data Docs site after each one (about 0.4 s per table here, paid hundreds of times by a database of hundreds of
    tables). Here each validation adds one suite, asset and validation definition to the shared context and stores
    its result; :meth:`build_data_docs` renders the site from all of them. Each validation gets its own GX data
    source, and with it its own execution engine and batch: :meth:`validate_all` runs several at once.
    """

    def __init__(self, expectations_dir: Path | str | None = None, data_docs_dir: Path | str | None = None):
        self.expectations_dir = expectations_dir
        self.docs = Path(data_docs_dir).resolve() if data_docs_dir is not None else None
        if self.docs is not None:
            self.docs.mkdir(parents=True, exist_ok=True)
        self.context = _context(self.docs)
        self._labels: set[str] = set()
        self._assets: set[str] = set()
        self._sources = 0

    def validate_all(self, validations: list[Validation]) -> list[SuiteResult]:
        """Each of ``validations``, its result in the same order: the small frames' suites several at a time
        (:data:`VALIDATIONS_AT_ONCE`), then the large frames' one by one."""
        if not validations:
            return []
        registered = [self._register(validation) for validation in validations]  # GX's context: one thread
        results: dict[int, SuiteResult] = {}
        spark = validations[0].df.sparkSession
        with limits_use_every_core(spark):
            small = [i for i, validation in enumerate(validations) if not validation.clustered]
            with ThreadPoolExecutor(max_workers=VALIDATIONS_AT_ONCE) as pool:
                running = {i: pool.submit(self._run, registered[i]) for i in small}
                results.update({i: done.result() for i, done in running.items()})
            for i, validation in enumerate(validations):
                if validation.clustered:
                    results[i] = self._run(registered[i])
        return [results[i] for i in range(len(validations))]

    def _register(self, validation: Validation) -> _Registered:
        import great_expectations as gx

        config = load_suite_config(validation.suite_name, self.expectations_dir)
        label = _unique(_safe(validation.suite_label or validation.suite_name), self._labels)
        expectations = render_expectations(config, validation.parameters)
        suite = self.context.suites.add_or_update(_build_suite(label, config, expectations))
        df = _narrowed(validation.df, expectations)
        local = _validated_locally(validation, expectations, df)
        if validation.clustered:
            df = _clustered_for_uniqueness(df, expectations)
        # A short name: GX puts it, with the asset's, in the result's file name.
        self._sources += 1
        if local:
            source = self.context.data_sources.add_pandas(f"pandas-{self._sources}")
        else:
            source = self.context.data_sources.add_spark(f"spark-{self._sources}")
        asset = source.add_dataframe_asset(_unique(_safe(validation.asset_name or label), self._assets))
        batch_definition = asset.add_batch_definition_whole_dataframe("whole_dataframe")
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{label}-validation", data=batch_definition, suite=suite)
        )
        return _Registered(label, definition, df, local, validation)

    @staticmethod
    def _run(registered: _Registered) -> SuiteResult:
        from great_expectations.core.run_identifier import RunIdentifier

        run_name = registered.validation.run_name
        run_id = RunIdentifier(run_name=run_name) if run_name else None

        def validated(frame) -> SuiteResult:
            result_format = {"result_format": "SUMMARY"}
            outcome = registered.definition.run(
                batch_parameters={"dataframe": frame}, result_format=result_format, run_id=run_id
            )
            return _summarize(registered.label, outcome)

        if registered.local:
            return validated(_collected(registered.df))
        with _cached_while_validated(registered.df, compute_first=registered.validation.clustered):
            return validated(registered.df)

    def build_data_docs(self) -> str | None:
        """Render the Data Docs site of every validation so far; the path of its ``index.html`` (None without one)."""
        if self.docs is None:
            return None
        self.context.build_data_docs()
        index = self.docs / "index.html"
        return str(index) if index.exists() else None


# kwargs that name the column(s) an expectation reads (GX 1.x column and column-pair expectations; multicolumn ones
# name theirs in ``column_list``).
_COLUMN_KWARGS = ("column", "column_A", "column_B")


def columns_read(expectations: list[dict]) -> list[str] | None:
    """The columns a rendered suite reads, in order of first mention; None when that is not known from the kwargs:
    a table-level expectation (row count, column names), a ``row_condition`` (it may name any column), or an
    expectation that names no column."""
    columns: list[str] = []
    for expectation in expectations:
        kwargs = expectation.get("kwargs") or {}
        if expectation["type"].startswith("expect_table_") or kwargs.get("row_condition"):
            return None
        named = [kwargs[k] for k in _COLUMN_KWARGS if k in kwargs] + list(kwargs.get("column_list") or [])
        if not named or not all(isinstance(name, str) for name in named):
            return None
        columns += [name for name in named if name not in columns]
    return columns


def _narrowed(df, expectations: list[dict]):
    """``df`` with only the columns the suite reads, when they are known and all present.

    GX caches the frame it validates and every metric query scans it: a wide frame (the reconciliation diff carries
    images and provenance of both sides) costs more to cache than the suite's checks cost to run. The result is the
    same: column expectations see the same rows. A missing column is left for GX to report in its own words.
    """
    columns = columns_read(expectations)
    if columns is None or not set(columns) <= set(df.columns) or len(columns) == len(df.columns):
        return df
    return df.select(*[_quoted(name) for name in columns])


def _validated_locally(validation: Validation, expectations: list[dict], df) -> bool:
    """Whether ``df`` (narrowed to the columns the suite reads) is small enough to validate on the driver with GX's
    pandas engine, and the suite gets the same answers there as from GX's Spark engine.

    A small table's suite is a dozen Spark jobs of a few rows each, so a run pays ~0.5 s of planning and scheduling
    per table it audits, however few its rows: hundreds of tables cost minutes a night. Collected, it is one job.
    The row count must be known (``rows``), every expectation engine-neutral (:data:`_ENGINE_NEUTRAL_EXPECTATIONS`:
    a regular expression, say, would be Java's on Spark and Python's in pandas), and every column read of a type
    both engines read alike (:data:`_LOCAL_TYPE_NAMES`).
    """
    if validation.rows is None or validation.rows > LOCAL_MAX_ROWS:
        return False
    if not expectations or any(e["type"] not in _ENGINE_NEUTRAL_EXPECTATIONS for e in expectations):
        return False
    # None for a row_condition too: a condition is written in one engine's syntax.
    columns = columns_read(expectations)
    if columns is None or not set(columns) <= set(df.columns):
        return False  # GX reports a missing column in its own words: left to the Spark engine, as before
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    return all(types[name] in _LOCAL_TYPE_NAMES for name in columns)


def _collected(df):
    """``df``'s rows as a pandas frame of Arrow-backed columns (one Spark job). With pandas' own dtypes an integer
    column holding a NULL would become float64 (two keys beyond 2^53 could then compare equal) and NaN would count
    as NULL; Arrow-backed columns keep Spark's values and its NULLs apart from NaN."""
    import pandas as pd

    return df.toArrow().to_pandas(types_mapper=pd.ArrowDtype)


def _quoted(name: str) -> str:
    """A column name as Spark resolves it literally (names may hold dots)."""
    return "`" + name.replace("`", "``") + "`"


def _uniqueness_partitioning(df, expectations: list[dict]):
    """The window partitioning GX's Spark metric gives the suite's first uniqueness check on ``df``:
    ``struct(columns)`` for compound columns, the column itself for one. None without such a check (or when a column
    it names is not in ``df``: GX reports that in its own words)."""
    from pyspark.sql import functions as F

    for expectation in expectations:
        kwargs = expectation.get("kwargs") or {}
        if kwargs.get("row_condition"):
            continue  # a filtered check windows the rows its condition keeps: left as GX runs it
        if expectation["type"] == "expect_compound_columns_to_be_unique":
            columns = list(kwargs["column_list"])
            partitioning = F.struct(*[_quoted(name) for name in columns])
        elif expectation["type"] == "expect_column_values_to_be_unique":
            columns = [kwargs["column"]]
            partitioning = F.col(_quoted(kwargs["column"]))
        else:
            continue
        return partitioning if set(columns) <= set(df.columns) else None
    return None


def _clustered_for_uniqueness(df, expectations: list[dict]):
    """``df`` hash-partitioned and sorted the way the suite's uniqueness check windows it, when it has one.

    GX checks uniqueness with a count over a window partitioned by the key, and runs that window twice: once to
    count the duplicate rows, once for its sample of them (a passing check's sample scans every row to find none).
    Each window shuffled and sorted the whole frame (6-7 s at 5M rows). GX caches the frame it validates; cached
    this way, both windows read the cache as it is, with no shuffle or sort of their own. The rows are the same.
    """
    partitioning = _uniqueness_partitioning(df, expectations)
    if partitioning is None:
        return df
    return df.repartition(partitioning).sortWithinPartitions(partitioning)


@contextlib.contextmanager
def _cached_while_validated(df, compute_first: bool):
    """``df`` dropped from the cache once GX is done with it; with ``compute_first``, cached and computed before GX
    plans its queries.

    GX caches the frame it validates and never lets go of it: a run's audited tables would all stay cached until
    the session ends. Computed up front, the cache also tells Spark how its rows are partitioned, which a query
    planned while the cache is still empty does not know (see :func:`_clustered_for_uniqueness`). A frame the caller
    cached is left as it is.
    """
    if df.storageLevel.useMemory or df.storageLevel.useDisk:
        yield
        return
    try:
        if compute_first:
            # Spark alone reads the table into the cache (planned when persisted), so with the vectorized Parquet
            # reader; GX's queries, which may run Python, read the cache.
            with vectorized_parquet_reads(df.sparkSession):
                df.persist()
                df.count()
        yield
    finally:
        df.unpersist()


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... when it is ``taken`` already (two table ids may differ only in
    characters :func:`_safe` replaces); the name returned is added to ``taken``."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate


def _summarize(label: str, outcome) -> SuiteResult:
    """A GX suite validation result as a :class:`SuiteResult` (plain JSON values, a line per failed expectation)."""
    failed: list[str] = []
    results: list[dict] = []
    for item in outcome.results:
        kind = item.expectation_config.type
        kwargs = {k: v for k, v in item.expectation_config.kwargs.items() if k != "batch_id"}
        result = _nulls_as_none(dict(item.result or {}))
        exception = dict(item.exception_info or {}) if isinstance(item.exception_info, dict) else None
        results.append(
            {
                "type": kind,
                "kwargs": kwargs,
                "success": bool(item.success),
                "unexpected_count": result.get("unexpected_count"),
                "element_count": result.get("element_count"),
                "partial_unexpected_counts": result.get("partial_unexpected_counts"),
            }
        )
        if not item.success:
            failed.append(_describe_failure(kind, kwargs, result, exception))
    return SuiteResult(
        suite_name=label,
        success=bool(outcome.success),
        failed=failed,
        statistics=json.loads(json.dumps(dict(outcome.statistics), default=str)),
        results=json.loads(json.dumps(results, default=str)),
    )


def _nulls_as_none(value: Any) -> Any:
    """``value`` with pandas' NULL (``pd.NA``, in the samples of a suite validated by GX's pandas engine) as None,
    as GX's Spark engine reports a NULL."""
    import pandas as pd

    if isinstance(value, dict):
        return {k: _nulls_as_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_nulls_as_none(v) for v in value)
    return None if value is pd.NA else value


def run_suite(
    df,
    suite_name: str,
    expectations_dir: Path | str | None = None,
    data_docs_dir: Path | str | None = None,
    *,
    parameters: dict | None = None,
    suite_label: str | None = None,
    asset_name: str | None = None,
    run_name: str | None = None,
    rows: int | None = None,
) -> SuiteResult:
    """Validate Spark DataFrame ``df`` with ``<expectations_dir>/<suite_name>.json`` and summarize the result.

    ``parameters`` fill the suite's template values; ``suite_label`` names the rendered suite (default: the suite
    name) in the stores and Data Docs, ``asset_name`` the validated data (default: the label). With
    ``data_docs_dir`` the Data Docs site is (re)built there; open ``index.html``. To validate several frames into one
    site, use a :class:`SuiteRunner`. ``rows``: about how many rows ``df`` has, when known: a frame of
    :data:`CLUSTERED_CACHE_MIN_ROWS` or more is cached clustered by its uniqueness check's key.
    """
    validation = Validation(df, suite_name, parameters, suite_label, asset_name, run_name, rows)
    return _validated_alone(validation, expectations_dir, data_docs_dir)


def _validated_alone(
    validation: Validation, expectations_dir: Path | str | None, data_docs_dir: Path | str | None
) -> SuiteResult:
    """One validation in a runner of its own, with its Data Docs site (when ``data_docs_dir`` is given)."""
    runner = SuiteRunner(expectations_dir, data_docs_dir)
    result = runner.validate_all([validation])[0]
    result.data_docs_index = runner.build_data_docs()
    return result


def latest_state_validation(
    df, key_columns: list[str], table_id: str | None = None, rows: int | None = None
) -> Validation:
    """The ``latest_state`` suite on one published table: key columns not null and (compound) unique. ``rows``: the
    table's row count, when known (see :data:`CLUSTERED_CACHE_MIN_ROWS`)."""
    if not key_columns:
        raise ValueError(f"the latest_state suite needs the key columns of table {table_id or '(unnamed)'}")
    return Validation(
        df,
        SUITE_LATEST_STATE,
        parameters={"key_columns": list(key_columns)},
        suite_label=f"{SUITE_LATEST_STATE}.{table_id}" if table_id else SUITE_LATEST_STATE,
        asset_name=table_id or SUITE_LATEST_STATE,
        rows=rows,
    )


def validate_latest_state(
    df,
    key_columns: list[str],
    expectations_dir: Path | str | None = None,
    data_docs_dir: Path | str | None = None,
    table_id: str | None = None,
    rows: int | None = None,
) -> SuiteResult:
    """Run the ``latest_state`` suite (:func:`latest_state_validation`) on one table, as one :func:`run_suite`
    (Data Docs built in ``data_docs_dir``). A run's audit validates all its tables in one :class:`SuiteRunner`."""
    return _validated_alone(latest_state_validation(df, key_columns, table_id, rows), expectations_dir, data_docs_dir)
