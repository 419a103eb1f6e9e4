"""Builder option declarations: spec errors name the option, the JSON Schema and the docs
come from the same declarations (issue 13)."""

import json
from pathlib import Path

import jsonschema
import pytest

from toyengine.errors import SpecError
from toyengine.models.options import OptionsError
from toyengine.study.spec import StudySpec
from toyengine.study.studyfile import options_markdown, study_json_schema

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
GOOD = (DATA / "tcc_small.yaml").read_text()
OPTS = "options: {range: [-4.0, 11.0]}"

BAD_OPTIONS = {
    # option text, field path, expected text
    "mapping for a name": ("options: {resolution: {a: 1}}",
                           "models.nominal.options.resolution.kind", "required"),
    "negative resolution": ("options: {resolution: -1}", "models.nominal.options.resolution",
                            "one of 'double_gaussian'"),
    "range reversed": ("options: {range: [5.0, 1.0]}", "models.nominal.options.range",
                       "lo < hi"),
    "range not a list": ("options: {range: {a: 1}}", "models.nominal.options.range", "a list"),
    "range negative length": ("options: {range: [-4.0]}", "models.nominal.options.range",
                              "at least 2 items"),
    "nan": ("options: {radius: .nan}", "models.nominal.options.radius", "finite"),
    "inf": ("options: {resolution_scale: .inf}", "models.nominal.options.resolution_scale",
            "finite"),
    "huge order": ("options: {background_order: 100000000}",
                   "models.nominal.options.background_order", "<= 6"),
    "bool for int": ("options: {L: true}", "models.nominal.options.L", "an integer"),
    "unknown option": ("options: {colour: red}", "models.nominal.options.colour",
                       "allowed keys"),
    "nested unknown": ("options: {unitarised: {gg: 1}}", "models.nominal.options.unitarised.gg",
                       "no such key"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_names_the_option_path(case):
    opt, path, expected = BAD_OPTIONS[case]
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(GOOD.replace(OPTS, opt), "bad.yaml", str(DATA))
    assert err.value.path == path, str(err.value)
    assert expected in err.value.expected, str(err.value)


def test_variant_patch_error_names_the_variant():
    text = GOOD + "variants:\n  - name: a\n    models: {nominal: {options: {L: -1}}}\n"
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(text, "bad.yaml", str(DATA))
    assert err.value.path == "variants[0].models.nominal.options.L"


def test_builder_parse_raises_options_error_for_direct_use():
    from toyengine.models.tcc import TccOptions

    with pytest.raises(OptionsError) as err:
        TccOptions.parse({"signal": "bww"})
    assert err.value.loc == ("signal",) and "tcc model: option signal" in str(err.value)
    assert TccOptions.parse({}).background_order == 2


def test_schema_validates_every_reference_study():
    schema = study_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    import yaml

    files = sorted((ROOT / "studies").glob("*/*.yaml"))
    assert len(files) >= 12
    for f in files:
        errors = list(validator.iter_errors(yaml.safe_load(f.read_text())))
        assert not errors, (f, errors[0].message)


def test_schema_rejects_bad_builder_options():
    import yaml

    validator = jsonschema.Draft202012Validator(study_json_schema())
    for opt, _, _ in BAD_OPTIONS.values():
        if ".nan" in opt or ".inf" in opt or "5.0, 1.0" in opt:
            continue  # listed in the docs as checks the schema cannot express
        doc = yaml.safe_load(GOOD.replace(OPTS, opt))
        assert list(validator.iter_errors(doc)), opt


def test_cli_schema_prints_the_schema(cli):
    res = cli("schema")
    assert res.returncode == 0
    assert json.loads(res.stdout) == json.loads(json.dumps(study_json_schema()))


def test_docs_option_tables_are_generated_from_the_declarations():
    doc = (ROOT / "docs" / "study-format.md").read_text()
    begin = doc.index("-->\n", doc.index("BEGIN GENERATED OPTIONS")) + 4
    end = doc.index("<!-- END GENERATED OPTIONS")
    assert doc[begin:end] == options_markdown(), "run: toyengine schema --markdown"


def test_schema_builder_accepts_registered_and_plugin_names_only():
    """``builder`` is a registered name or ``package.module:function`` (plug-ins); a name
    that is neither is refused by the schema as by the validator."""
    import yaml

    validator = jsonschema.Draft202012Validator(study_json_schema())
    doc = yaml.safe_load(GOOD)
    for name, ok in (("mass1d", True), ("tcc", True), ("mypkg.models:build", True),
                     ("expgauss:build", True), ("tcc2", False),
                     ("mypkg.models", False), ("mypkg:build model", False)):
        doc["models"]["nominal"] = {"builder": name}
        assert (not list(validator.iter_errors(doc))) is ok, name
