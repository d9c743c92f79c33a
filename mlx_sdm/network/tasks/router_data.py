"""What the question router learns from (``network/question_router.py``): prompts of each kind a
verifier covers, as people type them.

- each suite task: its own prompts (the instruction the verifier was built on) and the same payloads
  asked in a person's words (``TASK_PHRASINGS``; the last two phrasings of each task are kept for
  the held-out measurement only);
- open questions: the open-question task's questions (NQ-open, questions made in code; its shifted
  WebQuestions collection and held-out split are for the measurement only), and factual requests asked as
  instructions ("Name three planets.", ``OPEN_REQUESTS``; the last template held out);
- no checkable answer: greetings, thanks, writing requests, how-tos, advice and opinions, made from
  templates (``NO_ANSWER_TEMPLATES``; the last template of each kind is held out);
- factual questions asking for years, authors, places, hosts (``factual_phrasings.py``) and follow-ups read
  with the question before them (``question_router.follow_up_text``): open questions when they ask a
  checkable answer, no checkable answer when they ask for writing, opinions or more words.

The everyday check (``data/everyday_check_40.json``) and the factual check (``data/factual_check.json``) are
never among them. Deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.network.tasks.open_label import normalise_words
from mlx_sdm.network.tasks.registry import FEVER_WRAPPER

#: The router's class for a prompt whose answer nothing can check (a greeting, a poem, a how-to).
NO_CHECKABLE_ANSWER = "no_checkable_answer"
ROUTER_SEED = 0
#: Words of a payload shown in a person's phrasing (the BBC task shows 40 as well).
PAYLOAD_WORDS = 40
#: Phrasings held out of training per task (the last ones listed).
HELD_OUT_PHRASINGS = 2

#: A person's ways of asking each suite task; ``{x}`` is the payload (article, claim, e-mail, ...).
TASK_PHRASINGS = {
    "bbc_topic": ("What is this article about? {x}", "What topic is this news story? {x}",
                  "Is this article about business, entertainment, politics, sports or tech? {x}",
                  "Tell me the topic of this news article: {x}", "Which section of the newspaper is this from? {x}",
                  # everyday wordings, asked before or after the article ("Can you tell me what this is about?"
                  # went out of scope before them); HELD_OUT_TOPIC_PHRASINGS measures others, never trained on
                  "What's this article about? {x}", "Tell me what this story is about.\n\n{x}",
                  "Any idea what this news is about? {x}", "Read this and tell me its topic: {x}",
                  "{x}\n\nWhat is this article about?", "{x}\n\nWhat's the topic of this?",
                  "{x}\n\nCan you say what this story covers?",
                  "Please classify the topic of the following news article. {x}",
                  "Can you tell me what kind of news this is?\n\n{x}"),
    "fever": ("Is this claim true? {x}", "True or false: {x}", "Fact check this: {x}",
              "Is the following statement accurate? {x}", "Verify this claim for me: {x}",
              "Please check whether this is correct: {x}", "Is this a true fact or a false one? {x}"),
    "sports_understanding": ("Is this sentence plausible? {x}", "Does this sound plausible: {x}",
                             "Could this really happen in a game? {x}", "Plausible or implausible: {x}",
                             "Is the following sports statement plausible? {x}",
                             "Would a sports fan find this believable? {x}", "Does this make sense for that athlete? {x}"),
    "strategyqa": ("Yes or no: {x}", "Answer yes or no. {x}", "{x} Yes or no?", "Please answer with yes or no: {x}",
                   "Answer with true or false: {x}", "{x} Just say yes or no.", "Yes/no question: {x}"),
    "truthful_qa": ("Which of these is true? {x}", "Pick the correct option. {x}", "Choose the right answer: {x}",
                    "Which option is correct? {x}", "Multiple choice: {x}", "Select the true answer. {x}",
                    "What is the right choice here? {x}"),
    "spam": ("Is this e-mail spam? {x}", "Spam or not? {x}", "Is this message junk mail? {x}",
             "Should this e-mail go to my spam folder? {x}", "Check whether this e-mail is spam: {x}",
             "Does this email look like spam to you? {x}", "Is the following email legitimate or spam? {x}"),
    "sentiment": ("Is this tweet positive or negative? {x}", "What is the sentiment of this tweet? {x}",
                  "How does the author of this tweet feel? {x}", "Positive or negative: {x}",
                  "Classify this tweet's sentiment: {x}", "Is the tone of this tweet happy or unhappy? {x}",
                  "Does this tweet sound positive or negative? {x}"),
}

#: Everyday ways to ask what a pasted article is about, never trained on (the measurement of
#: ``scripts/bench/article_topic_routing.py``, written before it was run): the first three are the wordings users
#: were seen to type.
HELD_OUT_TOPIC_PHRASINGS = (
    "what is this about? {x}",
    "Can you tell me what this is about?\n\n{x}",
    "{x}\n\nWhat kind of news is this?",
    "{x}\n\nWhat is this about?",
    "Hey, what's this piece about? {x}",
    "Could you tell me what sort of article this is? {x}",
    "{x}\n\nwhat's this one about?",
    "What's the subject here?\n\n{x}",
)

_TOPICS = ("the sea", "autumn", "my cat", "friendship", "the moon", "a rainy day", "coffee", "winter", "the city",
           "mountains", "a lost dog", "the stars", "summer holidays", "my grandmother", "robots", "the forest",
           "a birthday", "spring flowers", "the ocean at night", "a train journey")
_ACTIVITIES = ("boil an egg", "learn to swim", "make bread", "fix a flat tire", "start running", "learn French",
               "write a cover letter", "save money", "clean my oven", "plant tomatoes", "tie a tie", "meditate",
               "get better sleep", "make pancakes", "study for exams", "train my puppy", "paint a room",
               "organise my closet", "stay motivated", "make new friends", "play chess", "bake a cake",
               "change a light bulb", "lose weight", "get a job", "learn to draw", "speak in public",
               "take better photos", "grow herbs indoors", "reduce stress")
#: Prompts with no checkable answer, by kind; each template is filled with topics or activities.
NO_ANSWER_TEMPLATES = {
    "greeting": ("Hello!", "Hi there!", "Hey, how's it going?", "Good evening!", "Hi, how are you doing today?",
                 "Hello, nice to meet you.", "Hey there, what's up?", "Good afternoon! How are you?", "Hi",
                 "Hey!", "Yo, anyone there?", "Greetings!", "Hello again.", "Hi, I have a question.",
                 "Hello, can you help me?", "Hey, good to see you.", "Hi! Are you there?", "Morning! How are you feeling?"),
    "thanks": ("Thank you!", "Thanks a lot, that helps.", "Great, thanks!", "Ok, got it.", "Cool, thank you so much.",
               "Perfect, that's what I needed.", "Thanks!", "That makes sense.", "Nice, I appreciate it.", "Ok",
               "Got it, thanks for the help.", "Wonderful, thank you.", "Okay, that was useful.", "Sounds good.",
               "Awesome, thanks for explaining.", "Okay, bye for now!"),
    "explain": ("Explain {t} to a child.", "Translate 'good morning' into Italian.", "How do you say 'please' in German?",
                "Explain what gravity is in simple words.", "Summarise the story of Snow White.", "Can you explain why people enjoy {t}?", "Tell me more about that.",
                "Why is that?", "Can you elaborate?", "Explain it in simpler words.", "What do you mean?",
                "Can you give me an example?", "Summarise our conversation so far.", "Continue."),
    "code": ("Write a Python function that sorts a list.", "Write a JavaScript snippet that shows an alert.",
             "Write a Python function that multiplies two numbers.", "Write a function in C that reverses an array.",
             "Write a Python script that reads a CSV file.", "Show me code that prints hello world.",
             "Write a Python class for a bank account.", "Write a unit test for this function.",
             "Fix the bug in my code.", "Write a SQL query that counts rows.", "Write a bash script that backs up a folder.",
             "How do I reverse a string in Python?", "Write a regular expression that matches an email address.",
             "Refactor this function to be shorter."),
    "rewrite": ("Rewrite this sentence more formally: i cant come today.", "Make this sound friendlier: Send it now.",
                "Translate this into a polite request: give me the report.", "Shorten this: I would like to ask you if "
                "it would be possible to meet.", "Write an email to my boss asking for a day off.",
                "Draft a text message inviting friends to dinner.", "Write a product description for a water bottle.",
                "Write a thank-you note to my teacher."),
    "writing": ("Write a poem about {t}.", "Write a short story about {t}.", "Write a haiku about {t}.",
                "Compose a song about {t}.", "Write a limerick about {t}.", "Write a few lines describing {t}.",
                "Describe {t} in three sentences.", "Write a paragraph about {t}."),
    "howto": ("How do I {a}?", "How can I {a}?", "What's the best way to {a}?", "Can you explain how to {a}?",
              "Give me step by step instructions to {a}.", "I want to {a}. Where do I start?",
              "Any tips on how to {a}?"),
    "advice": ("Can you help me plan a trip to {t}?", "Give me some ideas about {t}.",
               "What should I do this weekend?", "Help me decide what to cook for dinner.",
               "Can you recommend a good book about {t}?", "I'm feeling bored. Any suggestions?",
               "What gift should I buy for my friend?", "Can you help me with my homework?"),
    "opinion": ("What do you think about {t}?", "Do you like {t}?", "What is your favourite thing about {t}?",
                "Tell me a joke about {t}.", "Tell me something interesting about {t}.", "Tell me a joke.",
                "Why do people love {t}?"),
}


#: Factual requests asked as an instruction rather than a question ("Name three planets."): open questions too.
_LISTED = ("planets in the solar system", "oceans on Earth", "continents", "primary colours", "countries in South America",
           "capital cities in Europe", "noble gases", "types of triangles", "plays by Shakespeare", "vowels in English",
           "mammals that live in the sea", "bones in the human arm", "rivers in Africa", "US presidents",
           "elements on the periodic table", "languages spoken in Switzerland", "planets with rings", "states of matter",
           "members of the Beatles", "Olympic sports", "instruments in an orchestra", "parts of a flower",
           "countries that border France", "prime numbers under 20", "chess pieces", "gases in the air we breathe")
OPEN_REQUESTS = ("Name three {x}.", "List the {x}.", "Name two {x}.", "Tell me three {x}.", "Give me the names of the {x}.",
                 "List three {x}.", "Name one of the {x}.")
#: How much more a factual request counts in the fit than an open question: they are few beside ~1,650 questions.
REQUEST_WEIGHT = 4
#: Code requests start like factual requests ("Write a function that adds two numbers"): they count more (6 since
#: factual questions count FACTUAL_WEIGHT times: with 3, "Write a Python function that adds two numbers." read as
#: an open question, P 0.56; with 6, P 0.42).
CODE_WEIGHT = 6
#: How much more a factual question of ``factual_phrasings`` counts in the fit: the forms it adds (years, authors,
#: places) are few beside the ~1,650 questions of the pool (measured on the router's held-out prompts: with 1 it
#: took 95 of its 118 held-out factual questions for open questions, with 4 it took 117).
FACTUAL_WEIGHT = 4
#: How much more a follow-up pair counts in the fit (with 1, 28 of 30 held-out follow-ups with no checkable
#: answer stayed out of scope under the follow-up rule; with 2, 29).
FOLLOW_UP_WEIGHT = 2
#: An exact question asked as an instruction; ``{q}`` is the question without its question mark.
OPEN_INSTRUCTIONS = ("Tell me: {q}.", "Quick question: {q}?", "Answer this: {q}?", "I need to know: {q}?")


@dataclass(frozen=True)
class RoutedPrompt:
    prompt: str
    label: str  # a task name, "open_questions", or NO_CHECKABLE_ANSWER
    held_out: bool
    weight: int = 1  # times the row counts in the fit, within its kind's balance (a rare form of a common kind)
    previous: str | None = None  # a follow-up: the question it leans on (the router reads both, ``text``)

    @property
    def text(self) -> str:
        """What the router reads: the prompt, a follow-up with the question before it."""
        from mlx_sdm.network.question_router import follow_up_text

        return self.prompt if self.previous is None else follow_up_text(self.previous, self.prompt)


def _payload(text: str) -> str:
    return " ".join(text.split()[:PAYLOAD_WORDS])


def task_payload(task_name: str, document: str, prompt: str) -> str:
    """The payload of one task example as a person pastes it (``document``: the example's text, ``prompt``: the
    task's own prompt of it): a multiple-choice question with its options, a FEVER claim without BIG-bench's
    date wrapper, else the text; its first ``PAYLOAD_WORDS`` words."""
    text = document
    if task_name == "truthful_qa":  # the question with its lettered options
        text = prompt.split("QUESTION:", 1)[-1]
    elif task_name == "fever":  # the bare claim, without BIG-bench's date wrapper and question
        match = FEVER_WRAPPER.match(document)
        text = match.group(1) if match else document
    return _payload(text)


def _task_prompts(task, per_task: int, rng: np.random.Generator) -> list[RoutedPrompt]:
    phrasings = TASK_PHRASINGS.get(task.name, ())
    kept = len(phrasings) - HELD_OUT_PHRASINGS
    out = [RoutedPrompt(i.prompt, task.name, False) for i in task.split("pool", size=per_task)]
    out += [RoutedPrompt(i.prompt, task.name, True) for i in task.split("held_out", size=per_task // 4)]
    examples = task.examples()[0]
    for j, phrasing in enumerate(phrasings):
        held = j >= kept
        for i in rng.permutation(len(examples))[: (per_task // 4 if held else per_task // 2)]:
            example = examples[int(i)]
            payload = task_payload(task.name, example.text, task.render(example, "main"))
            out.append(RoutedPrompt(phrasing.format(x=payload), task.name, held))
    return out


#: Requests for an article's topic with no article (a follow-up, "What is this about?", asks about the turn before):
#: no task payload, so no task (the request clauses of the topic task's phrasings above).
BARE_TOPIC_REQUESTS = ("What's this article about?", "Tell me what this story is about.", "Any idea what this news is about?",
                       "What is this article about?", "What's the topic of this?", "Can you say what this story covers?",
                       "What is this article about?", "What topic is this news story?")


def _no_answer_prompts() -> list[RoutedPrompt]:
    out = [RoutedPrompt(p, NO_CHECKABLE_ANSWER, False) for p in dict.fromkeys(BARE_TOPIC_REQUESTS)]
    for kind, templates in NO_ANSWER_TEMPLATES.items():
        for j, template in enumerate(templates):
            held = j == len(templates) - 1
            fills = [template.format(t=t, a=a) for t, a in zip(_TOPICS * 2, _ACTIVITIES)] if "{" in template else [template]
            out += [RoutedPrompt(p, NO_CHECKABLE_ANSWER, held, CODE_WEIGHT if kind == "code" else 1)
                    for p in dict.fromkeys(fills)]
    return out


def _open_requests() -> list[RoutedPrompt]:
    """Factual requests as instructions (the last template of each list held out)."""
    from mlx_sdm.network.tasks.exact_questions import exact_questions

    out = []
    for j, template in enumerate(OPEN_REQUESTS):
        out += [RoutedPrompt(template.format(x=x), "open_questions", j == len(OPEN_REQUESTS) - 1, REQUEST_WEIGHT)
                for x in _LISTED]
    questions = exact_questions()
    for j, template in enumerate(OPEN_INSTRUCTIONS):
        for q in questions[j::12]:
            asked = q.question.rstrip("?.")
            out.append(RoutedPrompt(template.format(q=asked[:1].lower() + asked[1:]), "open_questions",
                                    j == len(OPEN_INSTRUCTIONS) - 1, REQUEST_WEIGHT))
    return out


def _factual_prompts() -> list[RoutedPrompt]:
    """Factual questions from templates (the last template of each group held out)."""
    from mlx_sdm.network.tasks.factual_phrasings import FACTUAL_GROUPS

    out = []
    for fills, templates in FACTUAL_GROUPS:
        for j, template in enumerate(templates):
            out += [RoutedPrompt(template.format(x=x), "open_questions", j == len(templates) - 1, FACTUAL_WEIGHT)
                    for x in fills]
    return out


def _follow_up_prompts(previous: list[str], rng: np.random.Generator) -> list[RoutedPrompt]:
    """Each follow-up after a few seeded previous questions (the last few held out)."""
    from mlx_sdm.network.tasks.factual_phrasings import (
        CHECKABLE_FOLLOW_UPS,
        FOLLOW_UP_PAIRS,
        HELD_OUT_FOLLOW_UPS,
        UNCHECKABLE_FOLLOW_UPS,
    )

    out = []
    for label, follow_ups in (("open_questions", CHECKABLE_FOLLOW_UPS), (NO_CHECKABLE_ANSWER, UNCHECKABLE_FOLLOW_UPS)):
        for j, follow_up in enumerate(follow_ups):
            held = j >= len(follow_ups) - HELD_OUT_FOLLOW_UPS
            out += [RoutedPrompt(follow_up, label, held, FOLLOW_UP_WEIGHT, previous=previous[int(i)])
                    for i in rng.choice(len(previous), size=FOLLOW_UP_PAIRS, replace=False)]
    return out


#: The topics of the four articles pasted with HELD_OUT_TOPIC_PHRASINGS.
HELD_OUT_ARTICLE_TOPICS = ("business", "sport", "entertainment", "politics")


def held_out_topic_articles() -> list[tuple[str, str]]:
    """(payload, gold topic) of four held-out BBC articles as a person pastes them (``task_payload``): the first
    article of the task's held-out split of each of ``HELD_OUT_ARTICLE_TOPICS`` whose words are in none of the
    router's prompts."""
    from mlx_sdm.network.tasks.registry import load_task

    task = load_task("bbc_topic")
    trained = " ".join(p.prompt for p in router_prompts() if p.label == task.name)
    out: dict[str, tuple[str, str]] = {}
    for item in task.split("held_out"):
        gold = str(item.gold)
        payload = task_payload(task.name, item.document, item.prompt)
        topic = next((t for t in HELD_OUT_ARTICLE_TOPICS if gold.startswith(t)), None)
        if topic is not None and topic not in out and payload[:80] not in trained:
            out[topic] = (payload, gold)
    return [out[t] for t in HELD_OUT_ARTICLE_TOPICS]


def held_out_wordings() -> set[tuple[str, ...]]:
    """The words of every prompt of the everyday check and the factual check (follow-ups: also as the router
    reads them): never trained on."""
    from mlx_sdm.network.question_router import follow_up_text
    from mlx_sdm.network.tasks.open_questions import everyday_check, factual_check

    check, factual = everyday_check(), factual_check()
    texts = [q["prompt"] for q in check.questions + check.no_checkable_answer + factual.questions]
    for row in factual.follow_ups + factual.no_checkable_follow_ups:
        texts += [row["prompt"], follow_up_text(row["previous"], row["prompt"])]
    return {tuple(normalise_words(t)) for t in texts}


def router_prompts(per_task: int = 100) -> list[RoutedPrompt]:
    """Every prompt the router learns from or is measured on (``held_out``), the everyday check excluded."""
    from mlx_sdm.network.tasks.exact_questions import exact_questions
    from mlx_sdm.network.tasks.registry import OPEN_TASK, SHIPPED_TASK_NAMES, load_task

    rng = np.random.default_rng(ROUTER_SEED)
    out: list[RoutedPrompt] = []
    for name in SHIPPED_TASK_NAMES:
        out += _task_prompts(load_task(name), per_task, rng)
    open_task = load_task(OPEN_TASK)
    out += [RoutedPrompt(i.prompt, OPEN_TASK, False) for i in open_task.split("pool")]
    out += [RoutedPrompt(i.prompt, OPEN_TASK, True) for i in open_task.split("held_out") + open_task.split("shifted")]
    out += _open_requests()
    out += _no_answer_prompts()
    factual = _factual_prompts()
    out += factual
    previous = [p.prompt for p in factual if not p.held_out] + [q.question for q in exact_questions()[::7]]
    out += _follow_up_prompts(previous, rng)
    checked = held_out_wordings()
    return [p for p in out if tuple(normalise_words(p.prompt)) not in checked and tuple(normalise_words(p.text)) not in checked]
