"""Everyday questions with one exact answer, made in code: arithmetic, unit conversions, counting facts,
capitals and a few other well-known facts, each asked in several of the ways people type them. They
are one source of the open-question task (``open_questions.py``); every question's gold answers are
exact, so its label needs no grader. Deterministic: the same list on every machine.

    for q in exact_questions():  q.id, q.question, q.answers, q.family
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.network.tasks.open_label import NUMBER_WORDS

#: The seed of every random choice here (which numbers, which phrasing).
EXACT_SEED = 0


@dataclass(frozen=True)
class ExactQuestion:
    id: str
    family: str  # arithmetic | units | counting | capitals | facts
    question: str
    answers: tuple[str, ...]


def _number(n: int) -> tuple[str, ...]:
    """A number's gold spellings (digits; its word too up to twenty)."""
    return (str(n), NUMBER_WORDS[n]) if 0 <= n < len(NUMBER_WORDS) else (str(n),)


def _arithmetic(rng: np.random.Generator) -> list[ExactQuestion]:
    out = []
    plus = ("What is {a} plus {b}?", "What's {a} + {b}?", "How much is {a} plus {b}?", "Calculate {a} + {b}.",
            "What do you get if you add {a} and {b}?", "What is the sum of {a} and {b}?")
    minus = ("What is {a} minus {b}?", "What's {a} - {b}?", "How much is {a} minus {b}?", "Calculate {a} - {b}.",
             "What is {b} subtracted from {a}?", "What do you get if you take {b} away from {a}?")
    times = ("What is {a} times {b}?", "What's {a} x {b}?", "How much is {a} multiplied by {b}?", "Calculate {a} * {b}.",
             "What is the product of {a} and {b}?", "What is {a} multiplied by {b}?")
    divided = ("What is {a} divided by {b}?", "What's {a} / {b}?", "How much is {a} divided by {b}?",
               "Calculate {a} / {b}.", "If you divide {a} by {b}, what do you get?")
    for i in range(110):
        a, b = int(rng.integers(1, 100)), int(rng.integers(1, 100))
        out.append(("plus", plus[i % len(plus)].format(a=a, b=b), a + b))
        hi, lo = max(a, b), min(a, b)
        out.append(("minus", minus[i % len(minus)].format(a=hi, b=lo), hi - lo))
    for i in range(90):
        a, b = int(rng.integers(2, 13)), int(rng.integers(2, 13))
        out.append(("times", times[i % len(times)].format(a=a, b=b), a * b))
        out.append(("divided", divided[i % len(divided)].format(a=a * b, b=b), a))
    for i in range(30):
        n = 2 * int(rng.integers(2, 60))
        out.append(("half", ("What is half of {n}?", "What is {n} divided in half?")[i % 2].format(n=n), n // 2))
        m = int(rng.integers(2, 50))
        out.append(("double", ("What is double {m}?", "What is twice {m}?")[i % 2].format(m=m), 2 * m))
    return [ExactQuestion(f"arith-{kind}-{i}", "arithmetic", q, _number(v)) for i, (kind, q, v) in enumerate(out)]


#: (smaller unit, larger unit in the singular, its plural, how many)
UNITS = (("seconds", "minute", "minutes", 60), ("minutes", "hour", "hours", 60), ("hours", "day", "days", 24),
         ("days", "week", "weeks", 7), ("months", "year", "years", 12), ("weeks", "year", "years", 52),
         ("days", "non-leap year", "non-leap years", 365), ("years", "decade", "decades", 10),
         ("years", "century", "centuries", 100), ("centimeters", "meter", "meters", 100),
         ("millimeters", "centimeter", "centimeters", 10), ("meters", "kilometer", "kilometers", 1000),
         ("grams", "kilogram", "kilograms", 1000), ("milliliters", "liter", "liters", 1000),
         ("inches", "foot", "feet", 12), ("feet", "yard", "yards", 3), ("ounces", "pound", "pounds", 16),
         ("cents", "dollar", "dollars", 100), ("seconds", "hour", "hours", 3600), ("minutes", "day", "days", 1440),
         ("millimeters", "meter", "meters", 1000), ("hours", "week", "weeks", 168), ("eggs", "dozen", "dozens", 12),
         ("quarts", "gallon", "gallons", 4), ("cups", "pint", "pints", 2), ("milligrams", "gram", "grams", 1000))


def _units(rng: np.random.Generator) -> list[ExactQuestion]:
    one = ("How many {small} are in a {big}?", "How many {small} are there in one {big}?",
           "How many {small} make a {big}?", "A {big} has how many {small}?")
    many = ("How many {small} are in {n} {bigs}?", "How many {small} are there in {n} {bigs}?",
            "Convert {n} {bigs} to {small}.", "{n} {bigs} is how many {small}?")
    out = []
    for i, (small, big, bigs, factor) in enumerate(UNITS):
        for j in range(2):
            out.append(ExactQuestion(f"units-one-{i}-{j}", "units", one[(i + j) % len(one)].format(small=small, big=big),
                                     _number(factor)))
        for j in range(5):
            n = int(rng.integers(2, 11))
            out.append(ExactQuestion(f"units-many-{i}-{j}", "units",
                                     many[(i + j) % len(many)].format(small=small, n=n, bigs=bigs), _number(n * factor)))
    return out


#: (question, answer): counting facts a person asks
COUNTING = (
    ("How many legs does a spider have?", 8), ("How many legs does an insect have?", 6), ("How many legs does a dog have?", 4),
    ("How many legs does a bird have?", 2), ("How many legs does an octopus have?", 8), ("How many legs does a horse have?", 4),
    ("How many arms does a starfish usually have?", 5), ("How many sides does a triangle have?", 3),
    ("How many sides does a square have?", 4), ("How many sides does a pentagon have?", 5),
    ("How many sides does a hexagon have?", 6), ("How many sides does an octagon have?", 8),
    ("How many sides does a heptagon have?", 7), ("How many sides does a decagon have?", 10),
    ("How many corners does a cube have?", 8), ("How many faces does a cube have?", 6), ("How many edges does a cube have?", 12),
    ("How many continents are there on Earth?", 7), ("How many planets are there in the solar system?", 8),
    ("How many oceans are there on Earth?", 5), ("How many colors are in a rainbow?", 7),
    ("How many days are there in a leap year?", 366), ("How many days does February have in a leap year?", 29),
    ("How many days are in the month of April?", 30), ("How many days are in January?", 31),
    ("How many players are on a basketball team on the court?", 5), ("How many players are on a volleyball team on the court?", 6),
    ("How many players does a baseball team have on the field?", 9), ("How many strings does a standard guitar have?", 6),
    ("How many strings does a violin have?", 4), ("How many keys does a standard piano have?", 88),
    ("How many letters are in the English alphabet?", 26), ("How many vowels are in the English alphabet?", 5),
    ("How many cards are in a standard deck?", 52), ("How many squares are on a chessboard?", 64),
    ("How many pieces does each player start with in chess?", 16), ("How many teeth does an adult human normally have?", 32),
    ("How many bones are in the adult human body?", 206), ("How many chambers does the human heart have?", 4),
    ("How many lungs does a person have?", 2), ("How many fingers are on one human hand?", 5),
    ("How many states are in the United States?", 50), ("How many stripes are on the US flag?", 13),
    ("How many wheels does a tricycle have?", 3), ("How many wheels does a bicycle have?", 2),
    ("How many sides does a die have?", 6), ("How many hours are on a clock face?", 12),
    ("How many degrees are in a right angle?", 90), ("How many degrees are in a circle?", 360),
    ("How many degrees do the angles of a triangle add up to?", 180), ("How many zeros are in one million?", 6),
    ("How many zeros are in one thousand?", 3), ("How many years are in a millennium?", 1000),
    ("How many notes are in a musical octave?", 8), ("How many Olympic rings are there?", 5),
    ("How many hearts does an octopus have?", 3), ("How many eyes does a spider usually have?", 8),
    ("How many humps does a dromedary camel have?", 1), ("How many wings does a bee have?", 4),
)


def _counting() -> list[ExactQuestion]:
    return [ExactQuestion(f"count-{i}", "counting", q, _number(v)) for i, (q, v) in enumerate(COUNTING)]


#: (country, capital, other accepted spellings)
CAPITALS = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
    ("the United Kingdom", "London"), ("Ireland", "Dublin"), ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"),
    ("Austria", "Vienna"), ("Switzerland", "Bern"), ("Poland", "Warsaw"), ("the Czech Republic", "Prague"),
    ("Hungary", "Budapest"), ("Greece", "Athens"), ("Sweden", "Stockholm"), ("Norway", "Oslo"), ("Denmark", "Copenhagen"),
    ("Finland", "Helsinki"), ("Iceland", "Reykjavik"), ("Russia", "Moscow"), ("Ukraine", "Kyiv", "Kiev"),
    ("Romania", "Bucharest"), ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Turkey", "Ankara"),
    ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Ghana", "Accra"), ("Ethiopia", "Addis Ababa"),
    ("South Africa", "Pretoria"), ("Morocco", "Rabat"), ("Algeria", "Algiers"), ("Tunisia", "Tunis"), ("Senegal", "Dakar"),
    ("Uganda", "Kampala"), ("Tanzania", "Dodoma"), ("Zimbabwe", "Harare"), ("Japan", "Tokyo"), ("China", "Beijing"),
    ("South Korea", "Seoul"), ("North Korea", "Pyongyang"), ("India", "New Delhi"), ("Pakistan", "Islamabad"),
    ("Bangladesh", "Dhaka"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"),
    ("the Philippines", "Manila"), ("Malaysia", "Kuala Lumpur"), ("Nepal", "Kathmandu"), ("Afghanistan", "Kabul"),
    ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"), ("Israel", "Jerusalem"), ("Jordan", "Amman"),
    ("Lebanon", "Beirut"), ("Syria", "Damascus"), ("Qatar", "Doha"), ("Mongolia", "Ulaanbaatar", "Ulan Bator"),
    ("Australia", "Canberra"), ("New Zealand", "Wellington"), ("Canada", "Ottawa"), ("the United States", "Washington"),
    ("Mexico", "Mexico City"), ("Cuba", "Havana"), ("Jamaica", "Kingston"), ("Brazil", "Brasilia", "Brasília"),
    ("Argentina", "Buenos Aires"), ("Chile", "Santiago"), ("Peru", "Lima"), ("Colombia", "Bogota", "Bogotá"),
    ("Venezuela", "Caracas"), ("Ecuador", "Quito"), ("Uruguay", "Montevideo"), ("Paraguay", "Asuncion", "Asunción"),
)
#: (US state, capital)
STATE_CAPITALS = (
    ("California", "Sacramento"), ("Texas", "Austin"), ("New York", "Albany"), ("Florida", "Tallahassee"),
    ("Illinois", "Springfield"), ("Pennsylvania", "Harrisburg"), ("Ohio", "Columbus"), ("Georgia", "Atlanta"),
    ("Michigan", "Lansing"), ("Washington State", "Olympia"), ("Massachusetts", "Boston"), ("Arizona", "Phoenix"),
    ("Colorado", "Denver"), ("Tennessee", "Nashville"), ("Oregon", "Salem"), ("Nevada", "Carson City"),
    ("Utah", "Salt Lake City"), ("Hawaii", "Honolulu"), ("Alaska", "Juneau"), ("Minnesota", "Saint Paul", "St. Paul"),
    ("Virginia", "Richmond"), ("North Carolina", "Raleigh"), ("Louisiana", "Baton Rouge"), ("Indiana", "Indianapolis"),
)


def _capitals() -> list[ExactQuestion]:
    asked = ("What is the capital of {x}?", "Tell me the capital of {x}.", "What's the capital city of {x}?",
             "Which city is the capital of {x}?", "Do you know the capital of {x}?", "Name the capital of {x}.")
    out = []
    for i, (country, *answers) in enumerate(CAPITALS):
        for j in range(2):
            out.append(ExactQuestion(f"capital-{i}-{j}", "capitals", asked[(i + 3 * j) % len(asked)].format(x=country),
                                     tuple(answers)))
    for i, (state, *answers) in enumerate(STATE_CAPITALS):
        out.append(ExactQuestion(f"state-capital-{i}", "capitals", asked[i % len(asked)].format(x=state), tuple(answers)))
    return out


#: (question, accepted answers): well-known facts with one answer
FACTS = (
    ("What is the chemical symbol for gold?", "Au"), ("What is the chemical symbol for silver?", "Ag"),
    ("What is the chemical symbol for iron?", "Fe"), ("What is the chemical symbol for sodium?", "Na"),
    ("What is the chemical symbol for oxygen?", "O"), ("What is the chemical symbol for carbon?", "C"),
    ("What is the chemical symbol for hydrogen?", "H"), ("What is the chemical symbol for helium?", "He"),
    ("What is the chemical symbol for potassium?", "K"), ("What is the chemical symbol for lead?", "Pb"),
    ("What is the chemical formula of water?", "H2O", "H₂O"), ("What is the chemical formula for table salt?", "NaCl"),
    ("Who wrote Hamlet?", "Shakespeare"), ("Who wrote Pride and Prejudice?", "Jane Austen", "Austen"),
    ("Who wrote 1984?", "George Orwell", "Orwell"), ("Who wrote War and Peace?", "Tolstoy"),
    ("Who wrote Don Quixote?", "Cervantes"), ("Who wrote The Odyssey?", "Homer"),
    ("Who wrote Harry Potter?", "Rowling"), ("Who wrote Oliver Twist?", "Dickens"),
    ("Who wrote The Origin of Species?", "Darwin"), ("Who painted The Starry Night?", "Van Gogh"),
    ("Who painted the ceiling of the Sistine Chapel?", "Michelangelo"), ("Who composed the Moonlight Sonata?", "Beethoven"),
    ("Who developed the theory of relativity?", "Einstein"), ("Who discovered penicillin?", "Fleming"),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong", "Armstrong"),
    ("Who was the first President of the United States?", "George Washington", "Washington"),
    ("What is the currency of the United Kingdom?", "pound"), ("What is the currency of the United States?", "dollar"),
    ("What currency is used in India?", "rupee"), ("What currency is used in China?", "yuan", "renminbi"),
    ("What is the currency of Mexico?", "peso"), ("What is the currency of Russia?", "ruble", "rouble"),
    ("What currency do they use in Germany?", "euro"), ("What language is spoken in Mexico?", "Spanish"),
    ("What language do people speak in Germany?", "German"), ("What is the official language of Egypt?", "Arabic"),
    ("What language is spoken in Argentina?", "Spanish"), ("What is the main language of Iran?", "Persian", "Farsi"),
    ("What is the largest country in the world by area?", "Russia"), ("What is the longest river in the world?", "Nile", "Amazon"),
    ("What is the largest desert in the world?", "Antarctic", "Sahara"), ("What is the smallest planet in the solar system?", "Mercury"),
    ("Which planet is closest to the Sun?", "Mercury"), ("Which planet is known as the Red Planet?", "Mars"),
    ("What is the hottest planet in the solar system?", "Venus"), ("Which planet has the most famous rings?", "Saturn"),
    ("What is the closest star to Earth?", "Sun"), ("What is the largest mammal?", "blue whale"),
    ("What is the fastest land animal?", "cheetah"), ("What is the largest bird?", "ostrich"),
    ("What do bees make?", "honey"), ("What is frozen water called?", "ice"),
    ("What gas do humans breathe out?", "carbon dioxide", "CO2"), ("What gas do we need to breathe to live?", "oxygen"),
    ("What is the hardest natural substance?", "diamond"), ("What is the largest organ of the human body?", "skin"),
    ("What organ pumps blood through the body?", "heart"), ("In which country are the pyramids of Giza?", "Egypt"),
    ("In which city is the Eiffel Tower?", "Paris"), ("In which country is the Great Wall?", "China"),
    ("In which city is the Colosseum?", "Rome"), ("On which continent is Kenya?", "Africa"),
    ("On which continent is Brazil?", "South America"), ("What color do you get by mixing blue and yellow?", "green"),
    ("What color do you get by mixing red and white?", "pink"), ("What is the opposite of hot?", "cold"),
    ("What is the plural of mouse?", "mice"), ("What is the past tense of go?", "went"),
    ("What is the square root of 81?", "9", "nine"), ("What is the square root of 144?", "12", "twelve"),
    ("What is 10 squared?", "100"), ("What is 2 to the power of 10?", "1024"),
    ("How many sides does a stop sign have?", "8", "eight"), ("What is the boiling point of water in Fahrenheit?", "212"),
    ("What is the freezing point of water in Fahrenheit?", "32"), ("What is the main ingredient of guacamole?", "avocado"),
    ("What fruit is used to make wine?", "grape"), ("What is the capital letter after A in the alphabet?", "B"),
)


def _facts() -> list[ExactQuestion]:
    return [ExactQuestion(f"fact-{i}", "facts", q, tuple(a)) for i, (q, *a) in enumerate(FACTS)]


def exact_questions() -> list[ExactQuestion]:
    """Every generated question (module docstring), in a fixed order."""
    rng = np.random.default_rng(EXACT_SEED)
    return _arithmetic(rng) + _units(rng) + _counting() + _capitals() + _facts()
