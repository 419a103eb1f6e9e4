"""The public surface is pinned: a change to it must show up here."""


import toyengine


def test_public_api():
    assert sorted(dir(toyengine)) == sorted(toyengine.__all__)
    assert set(toyengine.__all__) == {
        "Constraint", "FitResult", "ModelError", "Parameter", "ParameterSet",
        "RunReport", "SpecError", "StoreError", "StudySpec", "ToyEngineError", "__version__",
        "fit", "load_spec", "open_results", "run_study", "toy_data",
    }
    assert len(toyengine.__all__) <= 16



def test_subpackage_public_names():
    """The names ``toyengine.summary`` and ``toyengine.store`` export are pinned too; each
    is importable, and ``dir()`` of the package shows exactly those."""
    import toyengine.store
    import toyengine.summary

    assert set(toyengine.summary.__all__) == {
        "Chi2Fit", "EmpiricalP", "MissingDependencyError", "PValue", "PullRow", "PullTable",
        "SECTIONS", "ShiftDefinitions", "ShiftPair", "SignificanceSummary", "SpreadSummary",
        "SummaryError", "SystRow", "SystTable", "Table", "TailCheck", "VariantShift",
        "chi2_pvalue", "clopper_pearson", "empirical_pvalue", "failed_summary",
        "fit_chi2_ndof", "p_to_z", "plot_pulls", "plot_systematics", "plot_t_distribution",
        "pull_summary", "render_summary", "shift_definitions", "significance_summary",
        "summary_tables", "systematic_table", "test_statistic", "variant_significance",
        "write_plots", "z_to_p",
    }
    assert set(toyengine.store.__all__) == {
        "ChunkProblem", "FORMAT_VERSION", "StoreInfo", "check_chunks", "create_store",
        "extend_store", "open_results", "read_status", "unmark", "verify_store",
        "write_chunk", "write_status",
    }
    for pkg in (toyengine.summary, toyengine.store):
        assert len(set(pkg.__all__)) == len(pkg.__all__)
        assert all(hasattr(pkg, n) for n in pkg.__all__), pkg.__name__
    assert sorted(dir(toyengine.summary)) == sorted(toyengine.summary.__all__)

def test_layers_import_down_only():
    """No module imports a higher layer (core < models < study < run < cli; store and
    summary below run and cli), and the store does not import the package root or summary."""
    import ast
    from pathlib import Path

    rank = {"core": 0, "errors": 0, "_version": 0, "models": 1, "study": 2, "store": 3,
            "summary": 3, "run": 4, "cli": 5}
    root = Path(toyengine.__file__).parent
    bad = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).parts
        layer = rel[0].removesuffix(".py")
        if layer not in rank:
            continue
        depth = len(rel) - 1  # packages below the root holding f
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            if node.level <= depth:
                continue  # stays inside its own layer
            target = (node.module or "").split(".")[0]
            names = [a.name for a in node.names] if not target else [target]
            for t in names:
                if (t in rank and rank[t] > rank[layer]) or (layer == "store" and (
                        t == "summary" or (not node.module and t == "__version__"))):
                    bad.append(f"{'/'.join(rel)} imports {t}")
    assert bad == []



def test_summary_reads_datasets_only():
    """``summary/`` takes Datasets: it imports nothing from the store (opening stores and
    writing report files is the CLI's), and from ``core`` only the fit-status enum."""
    import ast
    from pathlib import Path

    root = Path(toyengine.__file__).parent / "summary"
    bad = []
    for f in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level != 2:
                continue
            top = (node.module or "").split(".")[0]
            names = {a.name for a in node.names}
            if top == "store" or (top == "core" and names != {"FitStatus"}):
                bad.append(f"{f.name}: from ..{node.module} import {sorted(names)}")
    assert bad == []


def test_no_private_module_of_another_layer():
    """A layer uses another layer's public names: no ``from ..summary._common import``."""
    import ast
    from pathlib import Path

    root = Path(toyengine.__file__).parent
    bad = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).parts
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level < len(rel):
                continue  # absolute, or inside its own layer
            mods = (node.module or "").split(".")
            if any(m.startswith("_") and m != "__version__" and not m.startswith("__")
                   for m in mods[1:]):
                bad.append(f"{'/'.join(rel)}: from {'.' * node.level}{node.module}")
    assert bad == []

def test_cli_status_summary_plot(tmp_path, cli):
    from pathlib import Path

    study = Path(__file__).parent / "data" / "tcc_small.yaml"
    store = tmp_path / "s.zarr"
    res = cli("run", str(study), "--store", str(store), "--workers", "1", "--toys", "6",
              "--summary")
    assert res.returncode == 0, res.stderr
    assert "Dask dashboard" in res.stderr and "6/6 toys" in res.stderr
    assert "Pulls" in res.stdout
    res = cli("status", str(store), "--json")
    assert res.returncode == 0 and '"toys_done": 6' in res.stdout
    for fmt, label in (("text", "δm_BW [MeV]"), ("markdown", "δm_BW [MeV]"),
                       ("latex", r"$\delta$m\_BW [MeV]"), ("json", "delta_m")):
        res = cli("summary", str(store), "--format", fmt)
        assert res.returncode == 0 and label in res.stdout, (fmt, res.stderr)
    res = cli("summary", str(store), "--format", "csv", "--section", "pulls")
    assert res.returncode == 0 and "delta_m" in res.stdout, res.stderr
    res = cli("plot", str(store), "--outdir", str(tmp_path / "plots"))
    assert res.returncode == 0, res.stderr
    pngs = list((tmp_path / "plots").glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)


def test_no_private_names_of_dependencies():
    """No module reaches into a private name of a dependency (distributed, dask,
    dask-jobqueue, numpy, ...): every ``obj._name`` used in ``toyengine/`` is a name that
    ``toyengine/`` itself defines, and no import or ``getattr`` names a private member of
    another package."""
    import ast
    from pathlib import Path

    root = Path(toyengine.__file__).parent
    trees = {f: ast.parse(f.read_text()) for f in root.rglob("*.py")}

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    own: set[str] = set()  # private names toyengine defines: defs, classes, attributes
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
    bad = []
    for f, tree in trees.items():
        where = f.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in own:
                bad.append(f"{where}:{node.lineno} .{node.attr}")
            elif (isinstance(node, ast.ImportFrom) and node.level == 0
                  and (node.module or "").split(".")[0] != "toyengine"):
                parts = (node.module or "").split(".") + [a.name for a in node.names]
                bad += [f"{where}:{node.lineno} from {node.module} import {p}"
                        for p in parts if private(p)]
            elif isinstance(node, ast.Import):
                bad += [f"{where}:{node.lineno} import {a.name}" for a in node.names
                        if any(private(p) for p in a.name.split("."))]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and private(node.args[1].value)
                  and node.args[1].value not in own):
                bad.append(f"{where}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert bad == []


def test_every_error_survives_pickling():
    """An error raised on a Dask worker reaches the client pickled: every exception class
    of :mod:`toyengine.errors` comes back with its message and fields (an error whose
    ``__init__`` takes fields and not the message broke the worker pool instead)."""
    import inspect
    import pickle

    from toyengine import errors

    made = {
        errors.OptionError: errors.OptionError("shape", "x", "one of gauss, cb"),
        errors.SpecError: errors.SpecError("fit.restarts[0].points", 64, "<= 50", "s.yaml"),
        errors.Interrupted: errors.Interrupted(3, 10, 2),
    }
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, Exception) and c.__module__ == errors.__name__]
    assert set(made) < set(classes)
    for cls in classes:
        err = made.get(cls) or cls("what went wrong")
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is cls and str(back) == str(err)
        assert vars(back) == vars(err)
