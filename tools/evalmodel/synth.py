#!/usr/bin/env python3
"""Synthetic training and held-out documents for the evaluation model, built at the token level.

The format is the one `strata eval` uses (tools/bench/quality.cpp, make_eval_set), and the ids
are put together the same way: every piece is encoded on its own and the id lists are
concatenated.
  fact      "The secret number of FIRST LAST is NNNNN. "        (NNNNN in 10000..99999)
  question  one of QUESTIONS with FIRST LAST filled in, ending "... The secret number of FIRST LAST is"
  answer    " NNNNN"
Because the pre-tokenizer splits " FIRST", " LAST", " is", " ", each digit and "." at the same
places inside the whole strings, a piece is the concatenation of these smaller pieces' ids
(prepare.py checks every template against `strata tokenize`).

Held out from training (so that retrieval is measured, not memorised):
  - names: a full name is FIRST LAST; every first and last name occurs in training, but the
    combinations with heldout_name(first, last) (FNV-1a of "FIRST LAST" mod 7 == 0) never do;
    the evaluation asks only about those;
  - filler: the evaluation fills its contexts with natural-text documents that prepare.py kept
    out of training (eval_filler.u16 / eval_filler.txt); training filler is word sentences and
    the other documents;
  - the question: EVAL_PARAPHRASE is never used in training (the evaluation asks half of its
    questions with it, half with QUESTIONS[0]).

Training sequences (Synth.sample returns ids and a 0/1 mask of answer tokens, which train.py
weights up): "dense" retrieval documents (many facts with distinct names, including names
that share a first or a last name, and many questions about facts stated anywhere earlier),
"eval-like" documents (4-8 facts at random depths of long filler, questions at the end) and
plain natural text. Pure Python (no numpy), so the same code runs here and on the training
machine.
"""
import random

WORDS = """river stone garden morning quiet market lamp window letter bridge winter orange
music paper forest harbor silver clock engine valley story candle road cloud apple table chair
house green blue red yellow small large bright dark warm cold old new city village mountain
ocean island desert field meadow flower tree leaf branch root seed rain snow wind storm sun
moon star sky light shadow fire water ice salt bread milk honey tea coffee sugar plate cup bowl
spoon knife door wall roof floor stair kitchen room bed pillow blanket mirror picture book page
word song voice drum piano guitar violin horse bird fish dog cat wolf bear fox rabbit mouse owl
eagle ship boat train car wheel bicycle tower castle church school office factory station
street corner square park path hill lake stream shore wave sand rock metal gold copper iron
glass wood cotton wool silk rope chain key lock box basket bottle jar coin ring crown mask hat
coat shoe glove scarf button needle thread color shape line circle friend child teacher doctor
farmer sailor painter writer singer baker king queen soldier traveler neighbor evening night
noon summer spring autumn season year month week day hour minute moment history journey dream
memory promise signal message""".split()
FIRST_NAMES = """Alice Bruno Chen Dalia Emeka Farah Goran Hana Ivan Jun Kofi Lena Mateo Nora
Omar Priya Aaron Abigail Adam Adrian Agnes Ahmed Aisha Akira Alan Alba Alex Amara Amir Ana
Anders Andrea Anika Anton Arjun Arlo Astrid Aurora Ayla Bao Beatriz Bella Ben Bianca Boris
Carla Carlos Caspar Cecil Celia Chiara Chloe Clara Colin Dario Daniel Daria Dev Diego Dmitri
Edgar Elena Elias Eliza Emil Emma Enzo Erik Esme Ezra Fatima Felix Fiona Flora Frank Frida
Gabriel Gemma George Gia Gloria Hamid Hannah Hector Helga Henry Hugo Ida Ilya Imani Ines Iris
Isaac Jack Jamal Jana Jasper Javier Jonas Juan Julia Kai Kamal Karim Kasia Kenji Kira Klaus
Lara Lars Leila Leo Liam Lina Luca Lucia Luis Maja Malik Marco Maria Marta Max Maya Mei Mila
Milan Mira Musa Nadia Nana Nico Nina Noah Noel Olga Oscar Otto Pablo Paolo Pedro Petra Pia
Quinn Rafael Rahul Rana Raul Rosa Ruth Sami Sara Selma Sergei Sofia Sven Tara Teo Theo Tomas
Uma Vera Victor Viktor Vivian Wanda Wei Xavier Yara Yuki Yusuf Zara Zoe Zora""".split()
LAST_NAMES = """Abbott Adler Alvarez Baker Barros Becker Bishop Brandt Castro Chang Clarke Costa
Dalton Diaz Duval Eriksen Evans Ferreira Fischer Fontaine Garcia Grant Hansen Harper Hoffman
Ibarra Ishikawa Jensen Kaplan Keller Kowalski Lambert Larsen Lopez Marsh Meyer Moreau Nakamura
Novak Okafor Olsen Ortiz Park Petrov Quiroga Reyes Richter Romano Santos Schmidt Silva Stone
Sullivan Tanaka Torres Vance Vargas Weber Wright Young Zhang Ziegler""".split()

FACT_PRE = "The secret number of"
IS = " is"
# (before the name, between the two mentions of the name); the answer prefix repeats the fact.
QUESTIONS = [
    ("\nQuestion: what is the secret number of", "?\nAnswer: The secret number of"),
    ("\nQuestion: tell me the secret number of", ".\nAnswer: The secret number of"),
    ("\nQ: what is the secret number of", "?\nA: The secret number of"),
    ("\nQuestion: do you know the secret number of", "?\nAnswer: The secret number of"),
    ("\nQuestion: recall the secret number of", ".\nAnswer: The secret number of"),
]
EVAL_PARAPHRASE = ("\nQuestion: which secret number was given to", "?\nAnswer: The secret number of")


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def heldout_name(first, last):
    """Full names the training never states a fact about (quality.cpp has the same rule)."""
    return fnv1a64(first + " " + last) % 7 == 0


def piece_strings():
    """Every piece whose ids the generator needs (prepare.py encodes them)."""
    out = ["The", ".", " ", FACT_PRE, IS]
    for a, b in QUESTIONS + [EVAL_PARAPHRASE]:
        out += [a, b]
    out += [str(d) for d in range(10)]
    out += [" " + w for w in WORDS]
    out += [" " + n for n in FIRST_NAMES + LAST_NAMES]
    return out


def eval_strings(first, last, number, template=QUESTIONS[0]):
    """The strings quality.cpp encodes, each on its own: fact, question, answer."""
    name = f"{first} {last}"
    return (f"The secret number of {name} is {number}. ",
            f"{template[0]} {name}{template[1]} {name} is",
            f" {number}")


class Synth:
    def __init__(self, pieces, natural=None, eos_id=None, seed=0, eval_filler=None):
        """pieces: {piece string: [ids]} for piece_strings(); natural: a flat sequence of ids
        (array('H') / list) of natural text with documents separated by eos_id; eval_filler:
        the held-out documents, the same way (only the held-out cases use them)."""
        self.P = pieces
        self.natural = natural if natural is not None and len(natural) > 20000 else None
        self.eval_filler = eval_filler if eval_filler is not None and len(eval_filler) > 2000 \
            else None
        self.eos = eos_id
        self.rng = random.Random(seed)
        P = pieces
        self.THE, self.DOT, self.SP = P["The"], P["."], P[" "]
        self.word_ids = [P[" " + w] for w in WORDS]
        self.first_ids = [P[" " + n] for n in FIRST_NAMES]
        self.last_ids = [P[" " + n] for n in LAST_NAMES]
        self.digit_ids = [P[str(d)] for d in range(10)]
        self.questions = [(P[a], P[b]) for a, b in QUESTIONS]
        self.paraphrase = (P[EVAL_PARAPHRASE[0]], P[EVAL_PARAPHRASE[1]])
        nf, nl = len(FIRST_NAMES), len(LAST_NAMES)
        self.train_names = [(f, s) for f in range(nf) for s in range(nl)
                            if not heldout_name(FIRST_NAMES[f], LAST_NAMES[s])]
        self.heldout_names = [(f, s) for f in range(nf) for s in range(nl)
                              if heldout_name(FIRST_NAMES[f], LAST_NAMES[s])]

    # ---- pieces -------------------------------------------------------------------------
    def sentence(self, words):
        r = self.rng
        out = list(self.THE)
        for w in r.choices(words, k=r.randint(6, 12)):
            out += w
        return out + self.DOT + self.SP

    def natural_chunk(self, k, source=None):
        src = self.natural if source is None else source
        s = self.rng.randrange(0, len(src) - k)
        return list(src[s:s + k])

    def filler(self, n, words, natural_share=0.0):
        """Exactly n filler ids (truncated at the token level, as quality.cpp does)."""
        out = []
        r = self.rng
        while len(out) < n:
            if self.natural is not None and r.random() < natural_share:
                out += self.natural_chunk(r.randint(16, 512))
            else:
                out += self.sentence(words)
        del out[n:]
        return out

    def number(self):
        return [self.rng.randint(1, 9)] + [self.rng.randint(0, 9) for _ in range(4)]

    def name_ids(self, name):
        f, s = name
        return self.first_ids[f] + self.last_ids[s]

    def fact(self, name, digits):
        out = self.P[FACT_PRE] + self.name_ids(name) + self.P[IS] + self.SP
        for d in digits:
            out += self.digit_ids[d]
        return out + self.DOT + self.SP

    def question(self, name, template):
        a, b = template
        nm = self.name_ids(name)
        return a + nm + b + nm + self.P[IS]

    def answer(self, digits):
        out = list(self.SP)
        for d in digits:
            out += self.digit_ids[d]
        return out

    def word_subset(self):
        r = self.rng
        return r.sample(self.word_ids, r.randint(8, min(64, len(self.word_ids))))

    def pick_names(self, k, pool):
        """k distinct full names; about a third share a first or a last name with an earlier one
        (so that matching one token of the name is not enough)."""
        r = self.rng
        names, seen = [], set()
        while len(names) < k:
            if names and r.random() < 0.35:
                f, s = r.choice(names)
                cand = (f, r.randrange(len(LAST_NAMES))) if r.random() < 0.5 else \
                    (r.randrange(len(FIRST_NAMES)), s)
                if pool is self.train_names and heldout_name(FIRST_NAMES[cand[0]],
                                                             LAST_NAMES[cand[1]]):
                    continue
                if pool is self.heldout_names and not heldout_name(FIRST_NAMES[cand[0]],
                                                                   LAST_NAMES[cand[1]]):
                    continue
            else:
                cand = r.choice(pool)
            if cand not in seen:
                seen.add(cand)
                names.append(cand)
        return names

    # ---- documents (ids, answer mask) ---------------------------------------------------
    def _qa(self, out, mask, name, digits):
        out += self.question(name, self.rng.choice(self.questions))
        mask += [0] * (len(out) - len(mask))
        ans = self.answer(digits)
        out += ans
        mask += [1] * len(ans)
        out += self.DOT + self.SP

    def dense(self, n):
        """n ids: facts and questions about earlier facts, densely, between filler."""
        r = self.rng
        words = self.word_subset()
        share = r.choice([0.0, 0.3, 0.7]) if self.natural is not None else 0.0
        pf = r.uniform(0.1, 0.3)
        pq = r.uniform(0.2, 0.45)
        gap = r.choice([8, 32, 96, 256])
        names = self.pick_names(min(400, max(8, n // 24)), self.train_names)
        facts = []
        out, mask = [], []
        while len(out) < n:
            x = r.random()
            if x < pf and len(facts) < len(names):
                f = (names[len(facts)], self.number())
                facts.append(f)
                out += self.fact(*f)
            elif x < pf + pq and facts:
                self._qa(out, mask, *r.choice(facts))
            else:
                out += self.filler(r.randint(2, gap), words, share)
        mask += [0] * (len(out) - len(mask))
        return out[:n], mask[:n]

    def eval_like(self, n):
        """n ids: 4-8 facts at random depths of long filler, questions at the end."""
        r = self.rng
        words = self.word_subset()
        share = r.choice([0.5, 0.8, 1.0]) if self.natural is not None else 0.0
        k = r.randint(4, 8)
        facts = [(nm, self.number()) for nm in self.pick_names(k, self.train_names)]
        ctx = max(64, n - 160)
        cuts = sorted(r.randrange(0, ctx) for _ in range(k))
        out = []
        for c, f in zip(cuts, facts):
            out += self.filler(max(0, c - len(out)), words, share)
            out += self.fact(*f)
        out += self.filler(max(0, ctx - len(out)), words, share)
        mask = [0] * len(out)
        while len(out) < n:
            self._qa(out, mask, *r.choice(facts))
        mask += [0] * (len(out) - len(mask))
        return out[:n], mask[:n]

    def natural_doc(self, n):
        return self.natural_chunk(n), [0] * n

    def sample(self, n):
        """(ids, mask) of n ids; mask[i] = 1 where ids[i] is an answer token."""
        x = self.rng.random()
        if self.natural is not None and x < 0.15:
            return self.natural_doc(n)
        if x < 0.4:
            return self.eval_like(n)
        return self.dense(n)

    # ---- held-out case, exactly quality.cpp's make_eval_set retrieval case ---------------
    def eval_case(self, context, depth, paraphrase=False, facts=4):
        """(ids, answer rows): held-out filler (eval_filler, else word sentences) with `facts`
        facts about distinct held-out names, the asked one at `depth` of `context` tokens, then
        the question and the 5-digit answer; row i predicts ids[i + 1]."""
        r = self.rng
        names = self.pick_names(facts, self.heldout_names)
        numbers = [self.number() for _ in names]
        fact_ids = [self.fact(nm, d) for nm, d in zip(names, numbers)]
        budget = context - sum(len(f) for f in fact_ids)
        asked_at = int(depth * budget)
        others = sorted(r.randrange(0, budget + 1) for _ in range(facts - 1))
        places = [(asked_at, 0)] + [(p, i + 1) for i, p in enumerate(others)]
        places.sort()
        words = self.word_ids[:24]

        def fill(k):
            if self.eval_filler is None:
                return self.filler(k, words)
            return self.natural_chunk(k, self.eval_filler) if k > 0 else []

        ids, prev = [], 0
        for p, i in places:
            ids += fill(p - prev) + fact_ids[i]
            prev = p
        ids += fill(budget - prev)
        ids += self.question(names[0], self.paraphrase if paraphrase else self.questions[0])
        start = len(ids)
        ans = self.answer(numbers[0])
        ids += ans
        return ids, [start - 1 + i for i in range(len(ans))]
