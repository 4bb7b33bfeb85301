"""Frozen separator rows: zero gradient, bitwise unchanged through AdamW with weight decay."""

from __future__ import annotations

import pytest

from ctxkit.errors import InputError, OptionError
from ctxkit.training.separator import freeze_token_rows

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SEP = 7


def _llama(tied: bool):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(config).eval()


def _step(model, optimizer):
    ids = torch.tensor([[3, 9, 12, SEP, 5, 30, SEP, 41, 2, SEP]])
    optimizer.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()


def _rows(model):
    out = [model.get_input_embeddings().weight]
    if model.get_output_embeddings().weight is not out[0]:
        out.append(model.get_output_embeddings().weight)
    return out


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("given_optimizer", [True, False])
def test_separator_rows_do_not_train(tied, given_optimizer):
    model = _llama(tied)
    params = _rows(model)
    assert len(params) == (1 if tied else 2)
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    frozen = freeze_token_rows(model, SEP, optimizer=optimizer if given_optimizer else None)
    assert frozen.token_ids == [SEP] and len(frozen.parameters) == len(params)
    for _ in range(3):
        _step(model, optimizer)
        for p in params:
            assert torch.count_nonzero(p.grad[SEP]) == 0
            assert torch.count_nonzero(p.grad[5]) > 0  # a token of the batch does train
    for p, b in zip(params, before):
        assert torch.equal(p[SEP], b[SEP])  # bitwise, despite weight decay and momentum
        assert not torch.equal(p[5], b[5])
        # a token absent from the batch only decays: unfrozen rows all change
        assert not torch.equal(p[60], b[60])
    frozen.remove()
    _step(model, optimizer)
    assert not torch.equal(params[0][SEP], before[0][SEP])


def test_weight_decay_alone_would_move_the_rows():
    # The gradient hook by itself is not enough: AdamW's decay shrinks a zero-gradient row.
    model = _llama(False)
    weight = model.get_input_embeddings().weight
    before = weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    frozen = freeze_token_rows(model, [SEP], optimizer=optimizer)
    frozen._handles.pop().remove()  # keep the gradient hooks, drop the restore
    _step(model, optimizer)
    assert torch.count_nonzero(weight.grad[SEP]) == 0
    assert not torch.equal(weight[SEP], before[SEP])
    frozen.remove()


def test_several_tokens_and_context_manager():
    model = _llama(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=0.1)
    before = model.get_output_embeddings().weight.detach().clone()
    with freeze_token_rows(model, [SEP, 2, SEP], optimizer=optimizer) as frozen:
        assert frozen.token_ids == [2, SEP]
        _step(model, optimizer)
        _step(model, optimizer)
    weight = model.get_output_embeddings().weight
    assert torch.equal(weight[[2, SEP]], before[[2, SEP]])
    assert not torch.equal(weight[3], before[3])


@pytest.mark.parametrize("ids,match", [
    (64, "token_ids"), (-1, "token_ids"), ([], "token_ids"), ("7", "token_ids"),
    ([1.5], "token_ids"), (True, "token_ids"),
])
def test_bad_token_ids(ids, match):
    with pytest.raises(OptionError, match=match):
        freeze_token_rows(_llama(True), ids)


def test_model_without_embeddings():
    with pytest.raises(InputError, match="input embedding"):
        freeze_token_rows(torch.nn.Linear(2, 2), 0)


def test_exported():
    import ctxkit

    assert ctxkit.freeze_token_rows is freeze_token_rows
    assert ctxkit.FreezeTokenRowsResult.__name__ == "FreezeTokenRowsResult"
