"""Answers to assignment 08, right and wrong, for the checks' tests (tests/students/test_catalogues.py)."""

import math

import torch
from torch import nn

from autograder import ch08_fast_inference as ch08
from autograder.reference import ch08_fast_inference as ref08

# ---- correct answers, written differently from the reference ----


def attend(q, K, V):
    w = torch.softmax(torch.einsum("...qd,...kd->...qk", q, K) / math.sqrt(q.size(-1)), dim=-1)
    return torch.einsum("...qk,...kv->...qv", w, V)



def step(query, key, value, cache=None, forget_newest=False):
    K = key if cache is None else torch.cat((cache[0], key), -2)
    V = value if cache is None else torch.cat((cache[1], value), -2)
    if forget_newest and cache is not None:
        return attend(query, cache[0], cache[1]), (K, V)  # the new key is cached but not attended to
    return attend(query, K, V), (K, V)



def window_step(query, key, value, cache, window, keep=0):
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    K = key if cache is None else torch.cat((cache[0], key), -2)
    V = value if cache is None else torch.cat((cache[1], value), -2)
    size = window + keep
    K, V = K[..., max(K.size(-2) - size, 0):, :], V[..., max(V.size(-2) - size, 0):, :]
    return attend(query, K, V), (K, V)



@torch.no_grad()
def greedy(model, prompt, max_new_tokens, use_cache=True, eos_id=None, sticky_eos=True, cache_prompt_once=True):
    out = prompt.clone()
    done = torch.zeros(len(prompt), dtype=torch.bool, device=prompt.device)
    cache = None
    for _ in range(max_new_tokens):
        if use_cache and cache is not None:
            logits, cache = model(out[:, -1:], cache)
        elif use_cache and cache_prompt_once:
            logits, cache = model(out, None)
        else:
            logits, _ = model(out)
        nxt = logits[:, -1, :].argmax(-1)
        if eos_id is not None and sticky_eos:
            nxt[done] = eos_id
            done |= nxt == eos_id
        out = torch.cat((out, nxt.unsqueeze(1)), 1)
    return out



class GQA(nn.Module):
    def __init__(self, num_hiddens, num_heads, num_kv_heads, bias=False, interleave=True):
        super().__init__()
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError("num_kv_heads must divide num_heads")
        self.h, self.kv, self.interleave = num_heads, num_kv_heads, interleave
        d = num_hiddens // num_heads
        self.W_q, self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias), nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k, self.W_v = nn.Linear(num_hiddens, num_kv_heads * d, bias=bias), nn.Linear(num_hiddens, num_kv_heads * d, bias=bias)

    def forward(self, queries, keys, values, mask=None):
        b, nq, _ = queries.shape
        q = self.W_q(queries).view(b, nq, self.h, -1).permute(0, 2, 1, 3)  # (b, h, q, d)
        k = self.W_k(keys).view(b, keys.size(1), self.kv, -1).permute(0, 2, 1, 3)  # (b, kv, k, d)
        v = self.W_v(values).view(b, values.size(1), self.kv, -1).permute(0, 2, 1, 3)
        g = self.h // self.kv
        # (b, kv, k, d) -> (b, h, k, d): query head j reads kv head j // g (or, wrongly, j % kv)
        index = torch.arange(self.h, device=q.device) // g if self.interleave else torch.arange(self.h, device=q.device) % self.kv
        k, v = k[:, index], v[:, index]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        w = torch.nan_to_num(s.softmax(-1), nan=0.0)
        return self.W_o((w @ v).transpose(1, 2).reshape(b, nq, -1))



def cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    return num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value * 2



def _forgets_newest_key(query, key, value, cache=None):
    return step(query, key, value, cache, forget_newest=True)



def _cache_not_grown(query, key, value, cache=None):
    output, _ = step(query, key, value, cache)
    return output, (key, value)  # only the newest position is kept



def _window_one_too_wide(query, key, value, cache, window):
    return window_step(query, key, value, cache, window, keep=1)



def _window_one_too_narrow(query, key, value, cache, window):
    return window_step(query, key, value, cache, window, keep=-1) if window > 1 else window_step(
        query, key, value, cache, window)



def _greedy_eos_not_sticky(model, prompt, max_new_tokens, use_cache=True, eos_id=None):
    return greedy(model, prompt, max_new_tokens, use_cache, eos_id, sticky_eos=False)



def _cache_ignored(model, prompt, max_new_tokens, use_cache=True, eos_id=None):
    return greedy(model, prompt, max_new_tokens, False, eos_id)  # right tokens, the whole prefix every step



def _cache_from_the_first_token(model, prompt, max_new_tokens, use_cache=True, eos_id=None):
    return greedy(model, prompt[:, -1:], max_new_tokens, use_cache, eos_id)  # the prompt's start never seen



class _GroupsInTheWrongOrder(GQA):
    def __init__(self, num_hiddens, num_heads, num_kv_heads, bias=False):
        super().__init__(num_hiddens, num_heads, num_kv_heads, bias, interleave=False)



class _WideKeys(GQA):
    def __init__(self, num_hiddens, num_heads, num_kv_heads, bias=False):
        super().__init__(num_hiddens, num_heads, num_kv_heads, bias)
        self.W_k, self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias), nn.Linear(num_hiddens, num_hiddens, bias=bias)



def _keys_only(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    return num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value



def _batch_forgotten(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * bytes_per_value


CORRECT = [  # (check, a correct answer, the autograder's reference, which must be refused)
    (ch08.check_cached_attention_step, step, ref08.cached_attention_step),
    (ch08.check_sliding_window_step, window_step, ref08.sliding_window_step),
    (ch08.check_sliding_window_step_arguments, window_step, ref08.sliding_window_step),
    (ch08.check_greedy_decode, greedy, ref08.greedy_decode),
    (ch08.check_grouped_query_attention, GQA, ref08.GroupedQueryAttention),
    (ch08.check_grouped_query_attention_arguments, GQA, ref08.GroupedQueryAttention),
    (ch08.check_kv_cache_bytes, cache_bytes, ref08.kv_cache_bytes),
]

# ---- wrong answers ----

TRAINING_CHECKS = []  # no part of assignment 08 trains a model

#: (name, check, answer, only the hidden cases catch it, a phrase of the message that says why)
WRONG_AND_WHY = [
    ("cache that forgets the newest key", ch08.check_cached_attention_step, _forgets_newest_key, False,
     "the outputs of every step: wrong values"),
    ("cache not grown", ch08.check_cached_attention_step, _cache_not_grown, False,
     "after step 2 the cache holds 1 position, expected 2"),
    ("window one position too wide", ch08.check_sliding_window_step, _window_one_too_wide, False,
     "the cache holds"),
    ("window one position too narrow", ch08.check_sliding_window_step, _window_one_too_narrow, False,
     "the cache holds"),
    ("end token not repeated", ch08.check_greedy_decode, _greedy_eos_not_sticky, False,
     "the tokens differ from greedy decoding's"),
    ("cache never used", ch08.check_greedy_decode, _cache_ignored, False, "then each new token alone with the cache"),
    ("prompt not fed whole", ch08.check_greedy_decode, _cache_from_the_first_token, False,
     "with the prompt once (no cache)"),
    ("groups mapped in the wrong order", ch08.check_grouped_query_attention, _GroupsInTheWrongOrder, False,
     "the output: wrong values"),
    ("keys and values as wide as the queries", ch08.check_grouped_query_attention, _WideKeys, False, "output features"),
    ("cache bytes of the keys only", ch08.check_kv_cache_bytes, _keys_only, False,
     "bytes"),  # "N bytes" (a hidden case does not say what was expected)
    ("cache bytes without the batch", ch08.check_kv_cache_bytes, _batch_forgotten, False,
     "bytes"),  # "N bytes" (a hidden case does not say what was expected)
]
#: the same without the phrase (as tests/students/test_one_bug.py reads them)
WRONG = [entry[:4] for entry in WRONG_AND_WHY]
#: the wrong answers above whose mistake the grading side knows (the reference's ``MISTAKES``), and how its
#: message names it (tests/students/test_mistakes.py)
KNOWN_MISTAKES = {
    "cache that forgets the newest key": "the new key and value cached but not attended to in their own step",
    "window one position too wide": "window one position too wide (window + 1 positions kept)",
    "window one position too narrow": "window one position too narrow (window − 1 positions kept)",
    "end token not repeated": "a sequence that produced eos_id goes on decoding instead of repeating it",
    "cache never used": "the cache never used: the whole prefix fed at every step, also with use_cache=True",
    "groups mapped in the wrong order": "query head g paired with key/value head g mod num_kv_heads (repeat instead "
                                        "of repeat_interleave)",
    "cache bytes of the keys only": "the keys only: the factor 2 for keys and values left out",
    "cache bytes without the batch": "batch_size left out",
}
