"""Plain ``torch.nn`` sequence/recommendation models: a BERT-base-like encoder, a small
GPT/LLaMA-like causal decoder, a DeepSpeech2-like conv+GRU, and NCF (NeuMF)."""
from __future__ import annotations

import torch
from torch import Tensor, nn


class Encoder(nn.Module):
    """BERT-like: token+position embeddings, post-norm transformer encoder, MLM head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, ff: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu", batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.norm(self.body(self.tok(ids) + self.pos(pos))))


class Decoder(nn.Module):
    """GPT/LLaMA-like: pre-norm causal self-attention stack, tied LM head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, ff: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        nn.init.normal_(self.tok.weight, std=0.02)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids: Tensor) -> Tensor:
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        h = self.body(self.tok(ids) + self.pos(pos), mask=self.mask[:n, :n], is_causal=True)
        return self.norm(h) @ self.tok.weight.t()


class DeepSpeech2(nn.Module):
    """DeepSpeech2-like: 2 strided conv layers on a spectrogram, bidirectional GRUs,
    per-frame character logits for CTC."""

    def __init__(self, freq: int = 161, hidden: int = 800, layers: int = 5, chars: int = 29, conv: int = 32) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, conv, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(conv), nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(conv, conv, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(conv), nn.Hardtanh(0, 20, inplace=True))
        f = (freq + 1) // 2
        f = (f + 1) // 2
        self.rnn = nn.GRU(conv * f, hidden, layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, chars)

    def forward(self, spec: Tensor) -> Tensor:  # spec: (B, 1, F, T)
        x = self.conv(spec)
        b, c, f, t = x.shape
        x = x.permute(0, 3, 1, 2).reshape(b, t, c * f)
        return self.fc(self.rnn(x)[0]).log_softmax(-1)  # (B, T', chars)


class NCF(nn.Module):
    """NeuMF: GMF and MLP towers over user/item embeddings, one logit per pair."""

    def __init__(self, users: int, items: int, factors: int = 64, mlp: tuple[int, ...] = (256, 128, 64)) -> None:
        super().__init__()
        self.gu, self.gi = nn.Embedding(users, factors), nn.Embedding(items, factors)
        self.mu, self.mi = nn.Embedding(users, mlp[0] // 2), nn.Embedding(items, mlp[0] // 2)
        layers: list[nn.Module] = []
        for a, b in zip(mlp, mlp[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(factors + mlp[-1], 1)

    def forward(self, uid: Tensor, iid: Tensor) -> Tensor:
        gmf = self.gu(uid) * self.gi(iid)
        mlp = self.mlp(torch.cat([self.mu(uid), self.mi(iid)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)
