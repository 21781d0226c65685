"""Environment images of a recipe: the tag hashes every input (pip lists included), `pip` per library, and
`grade --recipe` building a custom recipe's images. Pure Python: docker is faked where it would be asked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from nexus.errors import NexusError
from nexus.evals.swebench import environment
from nexus.evals.swebench.environment import image_name, setup_script
from nexus.evals.swebench.recipe import library_requirements, load_recipe, requirement_name

from .conftest import SHIPPED


def write_recipe(path, *, pip=("pytest==8.3.5",), libs=None):
    """A recipe with the bundled recipe's shape; `libs` maps name -> extra library fields."""
    libs = libs if libs is not None else {"more-itertools": {}}
    raw = {
        "owner": "mine",
        "commit": {"author": "me <me@example.invalid>", "date": "2024-01-01T00:00:00+00:00"},
        "environment": {"python": "3.11", "pip": list(pip or [])},
        "libraries": {name: {"version": "10.5.0", "sha256": "0" * 64, "import_root": ".", "tests": "tests", **extra}
                      for name, extra in libs.items()},
        "bugs": [],
    }
    if pip is None:
        del raw["environment"]["pip"]
    path.write_text(yaml.safe_dump(raw))
    return load_recipe(path)


def only_lib(recipe):
    (lib,) = recipe.libraries.values()
    return lib


def test_recipes_with_different_pip_lists_get_different_tags(tmp_path):
    a = write_recipe(tmp_path / "a.yaml", pip=["pytest==8.3.5"])
    b = write_recipe(tmp_path / "b.yaml", pip=["pytest==8.3.5", "hypothesis==6.112.0"])
    again = write_recipe(tmp_path / "again.yaml", pip=["pytest==8.3.5"])
    tag_a, tag_b = image_name(only_lib(a), a.environment), image_name(only_lib(b), b.environment)
    assert tag_a != tag_b
    assert tag_a == image_name(only_lib(again), again.environment)  # same inputs, same tag on every machine
    assert tag_a.startswith("nexus-tasks-env/more-itertools:10.5.0-py311-")


def test_every_input_of_the_image_changes_the_tag(tmp_path, monkeypatch):
    from nexus.sandbox import images

    base = write_recipe(tmp_path / "base.yaml")
    tag = image_name(only_lib(base), base.environment)
    src = write_recipe(tmp_path / "src.yaml", libs={"more-itertools": {"import_root": "src"}})
    assert image_name(only_lib(src), src.environment) != tag  # the .pth the image writes differs
    py = write_recipe(tmp_path / "py.yaml")
    assert image_name(only_lib(py), replace(py.environment, python="3.12")) != tag
    monkeypatch.setattr(images, "BASE_RECIPE", dict(images.BASE_RECIPE, recipe=images.BASE_RECIPE["recipe"] + 1))
    assert image_name(only_lib(base), base.environment) != tag  # a rebuilt base image is another image


def test_the_shipped_instances_name_their_recipes_images():
    recipe = load_recipe()
    want = {f"{recipe.owner}/{name}": image_name(lib, recipe.environment) for name, lib in recipe.libraries.items()}
    rows = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert {r["image"] for r in rows} == set(want.values())
    assert all(r["image"] == want[r["repo"]] for r in rows)


def test_pip_per_library_adds_and_replaces_the_global_list(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", pip=["pytest==8.3.5", "pytest-timeout==2.3.1"], libs={
        "more-itertools": {},
        "tabulate": {"pip": ["wcwidth==0.2.13", "PyTest>=7,<8"]},
    })
    env = recipe.environment
    plain, own = recipe.libraries["more-itertools"], recipe.libraries["tabulate"]
    assert library_requirements(plain, env) == ("pytest==8.3.5", "pytest-timeout==2.3.1")
    # `PyTest` names the same distribution as `pytest`: the library's pin wins, the other global entry stays.
    assert library_requirements(own, env) == ("pytest-timeout==2.3.1", "wcwidth==0.2.13", "PyTest>=7,<8")
    assert "'PyTest>=7,<8'" in setup_script(own, env)  # quoted: unquoted `>` would be a shell redirect
    assert image_name(plain, env).split("-")[-1] != image_name(own, env).split("-")[-1]


def test_pip_lists_are_optional_and_checked(tmp_path):
    recipe = write_recipe(tmp_path / "none.yaml", pip=None, libs={"tabulate": {"pip": ["pytest==8.3.5"]}})
    assert recipe.environment.pip == () and library_requirements(only_lib(recipe), recipe.environment) == (
        "pytest==8.3.5",)
    with pytest.raises(NexusError, match=r"`pip` of library tabulate must be a list of requirement strings"):
        write_recipe(tmp_path / "bad.yaml", libs={"tabulate": {"pip": "pytest"}})
    with pytest.raises(NexusError, match=r"names no distribution"):
        write_recipe(tmp_path / "bad2.yaml", pip=[">=8"])
    assert requirement_name("Py_Test.x >= 8") == "py-test-x"


class FakeEngine:
    """The two engine calls ensure_instance_image makes; no image exists."""

    def close(self):
        pass


@pytest.fixture
def no_images(monkeypatch):
    from nexus.sandbox import engine

    built = []
    monkeypatch.setattr(engine, "engine_client", FakeEngine)
    monkeypatch.setattr(engine, "image_exists", lambda client, name: False)
    monkeypatch.setattr(environment, "ensure_library_image",
                        lambda lib, env: built.append(lib.name) or image_name(lib, env))
    return built


def test_a_missing_image_is_built_from_the_given_recipe(tmp_path, shipped, no_images):
    recipe = write_recipe(tmp_path / "mine.yaml", libs={"tabulate": {"pip": ["wcwidth==0.2.13"]}})
    tag = image_name(only_lib(recipe), recipe.environment)
    inst = replace(next(iter(shipped.values())), image=tag)
    assert environment.ensure_instance_image(inst, recipe) == tag and no_images == ["tabulate"]
    with pytest.raises(NexusError, match=r"no library of the recipe .*data/tasks/recipe.yaml builds it; pass "
                                         r"--recipe") as e:
        environment.ensure_instance_image(inst)  # the bundled recipe does not build a custom recipe's image
    assert "\n" not in str(e.value)


def test_grade_passes_recipe_to_the_image_builder(tmp_path, monkeypatch):
    from nexus.cli import app
    from nexus.evals.swebench import grade

    recipe_path = tmp_path / "mine.yaml"
    write_recipe(recipe_path)
    seen = []

    def no_image(instance, recipe=None):
        seen.append(recipe.path if recipe else None)
        raise NexusError("no image here (test)")

    monkeypatch.setattr(grade, "ensure_instance_image", no_image)
    args = ["eval", "swebench", "grade", "--predictions", "gold", "--ids", "nexus-tasks__parse-1", "--workers", "1"]
    r = CliRunner().invoke(app, args + ["--recipe", str(recipe_path), "-o", str(tmp_path / "out")])
    assert r.exit_code == 1 and seen == [recipe_path]
    assert "error: nexus-tasks__parse-1: no image here (test)" in r.stderr

    r = CliRunner().invoke(app, args + ["--recipe", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "out2")])
    assert isinstance(r.exception, NexusError) and "does not exist" in str(r.exception)
    assert not (tmp_path / "out2").exists()
