"""FSDP's shard units chosen automatically (each repeated block, large modules outside them),
and ``wrap=`` / ``min_num_params=`` overriding that choice. Pure functions: no process group."""

from torch import nn

from trainmesh.strategies.fsdp import shard_units


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(self.up(self.norm(x)).relu())


class LanguageModel(nn.Module):
    def __init__(self, *, layers: int = 4, width: int = 32, vocab: int = 500, tied: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList([Block(width) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight


class Holder(nn.Module):
    """The Lightning pattern: the trained module holds the real model as one attribute."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net


def names(root: nn.Module, **options) -> list[str]:
    named = {id(m): name for name, m in root.named_modules()}
    return [named[id(unit)] for unit in shard_units(root, **{"wrap": None, "min_num_params": None, **options})]


def test_a_model_held_as_one_attribute_is_sharded_block_by_block():
    # One unit for self.net would gather every parameter at once: each layer is one, and the
    # embedding and the head, as large as a layer, are units too; the small final norm stays in the root.
    assert names(Holder(LanguageModel(layers=4))) == [
        "net.embed",
        "net.layers.0",
        "net.layers.1",
        "net.layers.2",
        "net.layers.3",
        "net.head",
    ]


def test_wrap_and_min_num_params_override_the_automatic_units():
    model = Holder(LanguageModel(layers=3))
    assert names(model)[1:4] == ["net.layers.0", "net.layers.1", "net.layers.2"]
    assert names(model, wrap=[LanguageModel]) == ["net"]
    assert set(names(model, wrap=[nn.Linear])) == {f"net.layers.{i}.{p}" for i in range(3) for p in ("up", "down")} | {
        "net.head"
    }
    # min_num_params: the smallest modules holding at least that many parameters.
    assert names(model, min_num_params=10**9) == []
    assert names(model, min_num_params=5_000) == [
        "net.head",
        "net.layers.2",
        "net.layers.1",
        "net.layers.0",
        "net.embed",
    ]


def test_torch_transformer_layers_are_blocks_wherever_they_are():
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(32, 2, 64, batch_first=True), num_layers=3, enable_nested_tensor=False
    )
    model = Holder(nn.ModuleDict({"encoder": encoder, "classifier": nn.Linear(32, 10)}))
    assert names(model) == ["net.encoder.layers.0", "net.encoder.layers.1", "net.encoder.layers.2"]
    alone = Holder(nn.TransformerDecoderLayer(32, 2, 64))  # one layer, in no container: still a block
    assert names(alone) == ["net"]


def test_a_model_without_repeated_blocks_shards_its_large_layers():
    class TwoLayers(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(784, 256), nn.Linear(256, 10)

    # fc1 is 99% of the model: its own unit; fc2 is too small to be worth a gather of its own.
    assert names(Holder(TwoLayers())) == ["net.fc1"]
    # Layers of one kind in a Sequential are repeated blocks, whatever their sizes.
    assert names(Holder(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)))) == ["net.0", "net.2"]


def test_tied_and_shared_weights_are_never_split_between_units():
    # The head shares the embedding's matrix: two units would each shard the same tensor.
    assert names(Holder(LanguageModel(layers=2, tied=True))) == ["net.layers.0", "net.layers.1"]
    # One layer object repeated (ALBERT-style sharing): its weights stay in the root.
    shared = Block(32)
    model = Holder(nn.ModuleList([shared, shared, shared]))
    assert names(model) == []


def test_a_layer_that_reads_its_childrens_weights_is_one_unit():
    # MultiheadAttention multiplies by out_proj.weight without calling out_proj: a unit of
    # out_proj alone would never be gathered. The attention layer is the unit, whole.
    class Pooling(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(64, 4)
            self.proj = nn.Linear(64, 2)

    assert names(Holder(Pooling())) == ["net.attn"]


def test_a_pipeline_stage_holding_one_layer_of_the_list_shards_it():
    # A stage keeps only its part of a ModuleDict of layers: one layer left is still a block.
    stage = LanguageModel(layers=4)
    stage.layers = nn.ModuleList([stage.layers[3]])
    stage.embed = stage.head = None
    assert names(Holder(stage)) == ["net.layers.0"]


def test_a_small_layer_beside_the_blocks_stays_in_the_root():
    wide = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4)])
    holder = Holder(wide)
    holder.head = nn.Linear(64, 10)
    assert names(holder) == ["net.0", "net.1", "net.2", "net.3"]  # the head (650 parameters) stays in the root
