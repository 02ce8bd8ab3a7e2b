#!/usr/bin/env python3
"""Synthetic training and held-out documents for the evaluation model, built at the token level.

The format is the one `strata eval` uses (tools/bench/quality.cpp, make_eval_set), and the ids
are put together the same way: every piece is encoded on its own and the id lists are
concatenated.
  filler sentence  "The w1 w2 ... wn. "   (n in 6..12; eval draws w from EVAL_WORDS)
  fact             "The secret number of NAME is NNNNN. "     (NNNNN in 10000..99999)
  question         "\\nQuestion: what is the secret number of NAME?\\nAnswer: The secret number of NAME is"
  answer           " NNNNN"
Because the pre-tokenizer splits " NAME", " is", " ", each digit and "." at the same places
inside the whole strings, a piece is the concatenation of these smaller pieces' ids
(prepare.py checks every template against `strata tokenize`).

Training sequences (Synth.sample): "dense" retrieval documents — many facts with distinct names
and many questions about facts stated anywhere earlier (distance up to the whole sequence),
between filler (eval-style sentences over a per-document word subset, or chunks of natural
text) —, "eval-like" documents (a few facts in long filler, a question at the end), and plain
natural text (Debian documentation, pre-tokenized). Pure Python (no numpy), so the same code
runs here and on the training machine.
"""
import random

EVAL_WORDS = ["river", "stone", "garden", "morning", "quiet", "market", "lamp", "window",
              "letter", "bridge", "winter", "orange", "music", "paper", "forest", "harbor",
              "silver", "clock", "engine", "valley", "story", "candle", "road", "cloud"]
EVAL_NAMES = ["Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivan",
              "Jun", "Kofi", "Lena", "Mateo", "Nora", "Omar", "Priya"]
EXTRA_WORDS = """apple table chair house green blue red yellow small large bright dark warm cold
old new city village mountain ocean island desert field meadow flower tree leaf branch root
seed rain snow wind storm sun moon star sky light shadow fire water ice salt bread milk honey
tea coffee sugar plate cup bowl spoon knife door wall roof floor stair garden kitchen room
bed pillow blanket mirror picture book page word song voice drum piano guitar violin horse
bird fish dog cat wolf bear fox rabbit mouse owl eagle ship boat train car wheel bicycle
tower castle church school office factory station street corner square park path hill lake
stream shore wave sand rock metal gold copper iron glass wood cotton wool silk rope chain
key lock box basket bottle jar coin ring crown mask hat coat shoe glove scarf button needle
thread color shape line circle number question answer friend child teacher doctor farmer
sailor painter writer singer baker king queen soldier traveler neighbor evening night noon
summer spring autumn season year month week day hour minute moment history journey dream
memory promise secret signal message""".split()
EXTRA_NAMES = """Aaron Abigail Adam Adrian Agnes Ahmed Aisha Akira Alan Alba Alex Amara Amir Ana
Anders Andrea Anika Anton Arjun Arlo Astrid Aurora Ayla Bao Beatriz Bella Ben Bianca Boris
Carla Carlos Caspar Cecil Celia Chiara Chloe Clara Colin Dario Daniel Daria Dev Diego Dmitri
Edgar Elena Elias Eliza Emil Emma Enzo Erik Esme Ezra Fatima Felix Fiona Flora Frank Frida
Gabriel Gemma George Gia Gloria Hamid Hannah Hector Helga Henry Hugo Ida Ilya Imani Ines Iris
Isaac Jack Jamal Jana Jasper Javier Jonas Juan Julia Kai Kamal Karim Kasia Kenji Kira Klaus
Lara Lars Leila Leo Liam Lina Luca Lucia Luis Maja Malik Marco Maria Marta Max Maya Mei Mila
Milan Mira Musa Nadia Nana Nico Nina Noah Noel Olga Oscar Otto Pablo Paolo Pedro Petra Pia
Quinn Rafael Rahul Rana Raul Rosa Ruth Sami Sara Selma Sergei Sofia Sven Tara Teo Theo Tomas
Uma Vera Victor Viktor Vivian Wanda Wei Xavier Yara Yuki Yusuf Zara Zoe Zora""".split()
WORDS = EVAL_WORDS + [w for w in EXTRA_WORDS if w not in EVAL_WORDS]
NAMES = EVAL_NAMES + [n for n in EXTRA_NAMES if n not in EVAL_NAMES]

FACT_PRE = "The secret number of"
IS = " is"
Q_PRE = "\nQuestion: what is the secret number of"
Q_MID = "?\nAnswer: The secret number of"


def piece_strings():
    """Every piece whose ids the generator needs (prepare.py encodes them)."""
    out = ["The", ".", " ", FACT_PRE, IS, Q_PRE, Q_MID]
    out += [str(d) for d in range(10)]
    out += [" " + w for w in WORDS]
    out += [" " + n for n in NAMES]
    return out


def eval_strings(name, number):
    """The strings quality.cpp encodes, each on its own: fact, question, answer."""
    return (f"The secret number of {name} is {number}. ",
            f"\nQuestion: what is the secret number of {name}?\nAnswer: The secret number of {name} is",
            f" {number}")


class Synth:
    def __init__(self, pieces, natural=None, eos_id=None, seed=0):
        """pieces: {piece string: [ids]} for piece_strings(); natural: a flat sequence of ids
        (array('H') / list) of natural text with documents separated by eos_id."""
        self.P = pieces
        self.natural = natural if natural is not None and len(natural) > 20000 else None
        self.eos = eos_id
        self.rng = random.Random(seed)
        P = pieces
        self.THE, self.DOT, self.SP = P["The"], P["."], P[" "]
        self.word_ids = [P[" " + w] for w in WORDS]
        self.eval_word_ids = self.word_ids[:len(EVAL_WORDS)]
        self.name_ids = [P[" " + n] for n in NAMES]
        self.digit_ids = [P[str(d)] for d in range(10)]

    # ---- pieces -------------------------------------------------------------------------
    def sentence(self, words):
        r = self.rng
        out = list(self.THE)
        for w in r.choices(words, k=r.randint(6, 12)):
            out += w
        return out + self.DOT + self.SP

    def filler(self, n, words, natural_share=0.0):
        """Exactly n filler ids (truncated at the token level, as quality.cpp does)."""
        out = []
        r = self.rng
        while len(out) < n:
            if self.natural is not None and r.random() < natural_share:
                k = r.randint(16, 256)
                s = r.randrange(0, len(self.natural) - k)
                out += self.natural[s:s + k]
            else:
                out += self.sentence(words)
        del out[n:]
        return out

    def number(self):
        return [self.rng.randint(1, 9)] + [self.rng.randint(0, 9) for _ in range(4)]

    def fact(self, name, digits):
        out = self.P[FACT_PRE] + self.name_ids[name] + self.P[IS] + self.SP
        for d in digits:
            out += self.digit_ids[d]
        return out + self.DOT + self.SP

    def question(self, name):
        return self.P[Q_PRE] + self.name_ids[name] + self.P[Q_MID] + self.name_ids[name] + self.P[IS]

    def answer(self, digits):
        out = list(self.SP)
        for d in digits:
            out += self.digit_ids[d]
        return out

    def word_subset(self):
        r = self.rng
        if r.random() < 0.3:
            return self.eval_word_ids
        return r.sample(self.word_ids, r.randint(8, min(64, len(self.word_ids))))

    # ---- documents ----------------------------------------------------------------------
    def dense(self, n):
        """n ids: facts and questions about earlier facts, densely, between filler."""
        r = self.rng
        words = self.word_subset()
        share = r.choice([0.0, 0.3, 0.7]) if self.natural is not None else 0.0
        pf = r.uniform(0.08, 0.25)
        pq = r.uniform(0.15, 0.4)
        names = r.sample(range(len(NAMES)), min(len(NAMES), 96))
        facts = []
        out = []
        while len(out) < n:
            x = r.random()
            if x < pf and len(facts) < len(names):
                f = (names[len(facts)], self.number())
                facts.append(f)
                out += self.fact(*f)
            elif x < pf + pq and facts:
                name, digits = r.choice(facts)
                out += self.question(name) + self.answer(digits) + self.DOT + self.SP
            else:
                out += self.filler(r.randint(4, 96), words, share)
        del out[n:]
        return out

    def eval_like(self, n):
        """n ids: 1-4 facts at random depths of long filler, questions near the end."""
        r = self.rng
        words = self.word_subset()
        share = r.choice([0.0, 0.0, 0.5]) if self.natural is not None else 0.0
        k = r.randint(1, 4)
        names = r.sample(range(len(NAMES)), k)
        facts = [(nm, self.number()) for nm in names]
        ctx = max(64, n - 96)
        cuts = sorted(r.randrange(0, ctx) for _ in range(k))
        out = []
        prev = 0
        for c, f in zip(cuts, facts):
            out += self.filler(c - prev, words, share)
            out += self.fact(*f)
            prev = c
        out += self.filler(max(0, ctx - len(out)), words, share)
        while len(out) < n:
            name, digits = r.choice(facts)
            out += self.question(name) + self.answer(digits) + self.DOT + self.SP
        del out[n:]
        return out

    def natural_doc(self, n):
        s = self.rng.randrange(0, len(self.natural) - n)
        return list(self.natural[s:s + n])

    def sample(self, n):
        x = self.rng.random()
        if self.natural is not None and x < 0.2:
            return self.natural_doc(n)
        if x < 0.35:
            return self.eval_like(n)
        return self.dense(n)

    # ---- held-out check, exactly quality.cpp's make_eval_set retrieval case --------------
    def eval_case(self, context, depth):
        """(ids, answer rows): filler over EVAL_WORDS with one fact at `depth` of `context`
        tokens, then the question and the 5-digit answer; row i predicts ids[i + 1]."""
        r = self.rng
        name = r.randrange(len(EVAL_NAMES))
        digits = self.number()
        fact = self.fact(name, digits)
        budget = context - len(fact)
        before = int(depth * budget)
        ids = self.filler(before, self.eval_word_ids) + fact
        ids += self.filler(budget - before, self.eval_word_ids)
        ids += self.question(name)
        start = len(ids)
        ans = self.answer(digits)
        ids += ans
        return ids, [start - 1 + i for i in range(len(ans))]
