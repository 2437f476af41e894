"""The inventory of Lightning's public API (`docs/lightning-api.md`) is generated from the installed
Lightning and stays true: a name Lightning gains, a name trainmesh gains or loses, or a comparison
with Lightning that starts naming it, all show up here until the table is regenerated."""

import pytest

pytest.importorskip("lightning")

from helpers.lightning_inventory import (  # noqa: E402
    STATUSES,
    TABLE,
    build_rows,
    counts,
    lightning_names,
    read_table,
    refusal,
    trainmesh_has,
)

REGENERATE = "regenerate it: python tests/helpers/lightning_inventory.py --write"


def test_every_public_name_of_lightning_is_listed():
    listed = {(r.area, r.name) for r in read_table()}
    unlisted = sorted(set(lightning_names()) - listed)
    assert not unlisted, f"Lightning names missing from {TABLE.name}: {unlisted[:20]}; {REGENERATE}"


def test_every_row_states_what_trainmesh_has_today():
    written = {r.key: r for r in read_table()}
    current = {r.key: r for r in build_rows()}
    stale = [(key, written.get(key), row) for key, row in current.items() if written.get(key) != row]
    assert not stale, f"{len(stale)} rows of {TABLE.name} are stale, e.g. {stale[:5]}; {REGENERATE}"
    assert set(written) == set(current), f"rows for names Lightning no longer has; {REGENERATE}"


def test_the_counts_in_the_table_header_and_the_guide_are_the_rows():
    rows = read_table()
    tally = counts(rows)
    header = ", ".join(f"{tally[s]} {s}" for s in STATUSES) + f" of {len(rows)}"
    assert header in TABLE.read_text()
    # The count line is on the "Coming from Lightning" page and in the README's feature table.
    guide = TABLE.parent / "how-to" / "lightning.md"
    text = " ".join(guide.read_text().split())
    assert header in text, f"{guide.name}'s count of Lightning's names is not the table's ({header})"
    readme = " ".join((TABLE.parent.parent / "README.md").read_text().split())
    assert header in readme, f"README.md's count of Lightning's names is not the table's ({header})"


def test_the_check_sees_a_name_trainmesh_loses(monkeypatch):
    # Self-test: if trainmesh lost a name the table says it has, its row would read "missing".
    import trainmesh.callbacks

    area = "lightning.pytorch.callbacks."
    assert trainmesh_has(area, "EarlyStopping", {})
    # The package imports its names on first use (callbacks/__init__.py's table): losing one is
    # losing its entry there, and the attribute its first use left.
    monkeypatch.delitem(trainmesh.callbacks._LAZY, "EarlyStopping")
    monkeypatch.delattr(trainmesh.callbacks, "EarlyStopping")
    assert not trainmesh_has(area, "EarlyStopping", {})


def test_a_refused_name_is_listed_with_the_reason_its_user_sees():
    # A class trainmesh refuses carries its reason (utilities/refusal.py): the row shows that text,
    # and using the name raises it; a refused Trainer argument reads its reason from the Trainer's table.
    import trainmesh.accelerators
    from trainmesh.trainer.lightning1.trainer_arguments import REFUSED_ARGUMENTS
    from trainmesh.utilities.refusal import RefusedError, refusal_of

    reason = refusal_of(trainmesh.accelerators.XLAAccelerator)
    assert refusal("lightning.pytorch.accelerators.", "XLAAccelerator") == reason
    assert refusal("1.9 Trainer(", "tpu_cores") == REFUSED_ARGUMENTS["tpu_cores"]
    assert refusal("lightning.pytorch.accelerators.", "CPUAccelerator") is None
    rows = {r.key: r for r in read_table()}
    row = rows["lightning.pytorch.accelerators.XLAAccelerator"]
    assert (row.status, row.evidence) == ("refused", reason)
    with pytest.raises(RefusedError, match="TPUs"):
        trainmesh.accelerators.XLAAccelerator()
    # Lightning's static availability check answers without an instance (False without torch_xla), as Lightning's:
    # its own tests (models/test_tpu.py) and a program ask it before choosing an accelerator
    from lightning.pytorch.accelerators import XLAAccelerator

    assert trainmesh.accelerators.XLAAccelerator.is_available() is XLAAccelerator.is_available() is False


# Lightning Fabric's half of the owner's API (`docs/fabric-api.md`), written by the same command.


def test_every_public_name_of_lightning_fabric_is_listed():
    from helpers import fabric_inventory

    listed = {(r.area, r.name) for r in read_table(fabric_inventory.TABLE)}
    unlisted = sorted(set(fabric_inventory.fabric_names()) - listed)
    assert not unlisted, f"Fabric names missing from fabric-api.md: {unlisted[:20]}; {REGENERATE}"


def test_every_fabric_row_states_what_trainmesh_has_today():
    from helpers import fabric_inventory

    written = {r.key: r for r in read_table(fabric_inventory.TABLE)}
    current = {r.key: r for r in fabric_inventory.build_rows()}
    stale = [(key, written.get(key), row) for key, row in current.items() if written.get(key) != row]
    assert not stale, f"{len(stale)} rows of fabric-api.md are stale, e.g. {stale[:5]}; {REGENERATE}"
    assert set(written) == set(current), f"rows for names Fabric no longer has; {REGENERATE}"


def test_the_fabric_counts_in_the_table_header_and_the_fabric_guide_are_the_rows():
    from helpers import fabric_inventory

    header = fabric_inventory.count_line(read_table(fabric_inventory.TABLE))
    assert header in fabric_inventory.TABLE.read_text()
    guide = fabric_inventory.TABLE.parent / "how-to" / "fabric.md"
    assert header in " ".join(guide.read_text().split()), (
        f"fabric.md's count of Fabric's names is not the table's ({header})"
    )


def test_the_fabric_check_sees_a_module_path_trainmesh_lacks(monkeypatch):
    # Self-test: a Fabric module path trainmesh cannot import reads "missing"; a name looked up on a module too.
    import sys

    import trainmesh.fabric
    from helpers import fabric_inventory

    assert fabric_inventory.trainmesh_has(fabric_inventory.PATHS, "utilities.seed", trainmesh.Fabric)
    monkeypatch.setitem(sys.modules, "trainmesh.fabric.utilities.seed", None)  # an import of it fails
    assert not fabric_inventory.trainmesh_has(fabric_inventory.PATHS, "utilities.seed", trainmesh.Fabric)
    assert fabric_inventory.trainmesh_has("Fabric.", "launch", trainmesh.Fabric)
    assert not fabric_inventory.trainmesh_has("Fabric.", "no_such_member", trainmesh.Fabric)
