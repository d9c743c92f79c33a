"""Factual questions and follow-ups as people type them, for the question router (``router_data.py``).

The open-question pool (NQ-open, questions made in code) is mostly "what is"/"how many" questions; people
also ask for years, dates, authors, places and hosts ("In what year did ...?", "Who is the author of ...?",
"In which country is ...?"), in lower case or without a question mark, and they follow a question up with
one that leans on it ("When did he write it?"). The question router reads such a follow-up together with
the question before it (``network/question_router.follow_up_text``), so it learns from those pairs too:
a follow-up that asks a checkable answer is an open question, one that asks for writing, an opinion or
more words is not.

Every list here is written without the held-out factual check (``data/factual_check.json``), and
``router_data`` drops any prompt with the same words as one of that check's (as it drops the everyday
check's). Templates: ``{x}`` is a fill of the list they are asked with; the LAST template of each group is
held out of training (the router's held-out measurement), as in ``router_data``.
"""

from __future__ import annotations

#: Past events, as the clause after "did" ("When did {x}?").
EVENTS = ("the American Civil War end", "the Chernobyl disaster happen", "the Beatles break up", "Queen Victoria die",
          "the Hindenburg crash", "Nelson Mandela become president", "the Great Depression start", "Germany reunify",
          "the euro come into use", "the first modern Olympic Games take place", "Vesuvius destroy Pompeii",
          "the Battle of Hastings take place", "India gain independence", "the Wall Street crash happen",
          "the Panama Canal open", "the Cold War end", "the Spanish Armada sail", "the Black Death reach Europe",
          "the Korean War start", "Elvis Presley die", "the Apollo 13 mission launch", "Alaska become a US state",
          "the Magna Carta get signed", "the Russian Revolution happen")
EVENT_TEMPLATES = ("In what year did {x}?", "When did {x}?", "What year did {x}?", "when did {x}",
                   "So when did {x}?", "Roughly when did {x}?", "In which year did {x}?")

#: Books, plays and poems ("Who wrote {x}?").
WORKS = ("Moby-Dick", "The Great Gatsby", "Jane Eyre", "Les Misérables", "The Divine Comedy", "Crime and Punishment",
         "One Hundred Years of Solitude", "The Hobbit", "Ulysses", "Brave New World", "The Canterbury Tales", "Faust",
         "The Little Prince", "Madame Bovary", "Anna Karenina", "The Catcher in the Rye", "Dracula", "Wuthering Heights",
         "Oliver Twist", "Macbeth", "The Raven", "Gulliver's Travels")
WORK_TEMPLATES = ("Who wrote {x}?", "Who is the author of {x}?", "who wrote {x}", "Which writer created {x}?",
                  "Can you tell me who wrote {x}?", "Who was the author of {x}?", "Do you know who wrote {x}?")

#: Things someone invented, discovered or made ("Who invented {x}?").
MADE = ("the steam engine", "the World Wide Web", "dynamite", "the radio", "the X-ray", "insulin", "the periodic table",
        "the polio vaccine", "calculus", "the television", "the telescope", "the thermometer", "the jet engine",
        "the printing telegraph", "the ballpoint pen", "the bicycle", "the microscope", "vaccination")
MADE_TEMPLATES = ("Who invented {x}?", "Who came up with {x}?", "who invented {x}", "Which scientist gave us {x}?",
                  "Do you know who invented {x}?", "Who is credited with inventing {x}?")

#: Places and landmarks ("Where is {x}?").
PLACES = ("the Colosseum", "Angkor Wat", "the Acropolis", "Stonehenge", "the Sagrada Familia", "Petra", "the Alhambra",
          "Mount Kilimanjaro", "Lake Titicaca", "the Louvre", "Chichen Itza", "the Kremlin", "Victoria Falls",
          "the Grand Canyon", "Table Mountain", "the Leaning Tower of Pisa", "Uluru", "the Blue Mosque")
PLACE_TEMPLATES = ("Where is {x}?", "In which country is {x}?", "Which country is {x} in?", "where is {x}",
                   "In what city is {x}?", "Where exactly is {x} located?", "Do you know where {x} is?")

#: Sports events ("Which city hosted {x}?").
GAMES = ("the 2008 Summer Olympics", "the 2016 Summer Olympics", "the 2014 World Cup", "the 1998 World Cup",
         "the 2000 Summer Olympics", "the 1992 Winter Olympics", "the 2010 World Cup", "Euro 2016",
         "the 1936 Olympics", "the 2002 World Cup", "the 1984 Summer Olympics", "the 2006 Winter Olympics")
GAME_TEMPLATES = ("Which city hosted {x}?", "Where were {x} held?", "Who won {x}?", "which country hosted {x}",
                  "Which nation hosted {x}?")

#: Paintings and sculptures ("Who painted {x}?").
ARTWORKS = ("The Thinker", "Guernica", "The Scream", "The Persistence of Memory", "Girl with a Pearl Earring",
            "The Night Watch", "Water Lilies", "The Birth of Venus", "American Gothic", "The Kiss",
            "Sunflowers", "The School of Athens")
ARTWORK_TEMPLATES = ("Who painted {x}?", "Who made {x}?", "Which artist created {x}?", "who painted {x}",
                     "Who was the artist behind {x}?")

#: Products and firsts ("When did {x} come out?").
RELEASES = ("the PlayStation", "Windows 95", "the Walkman", "the first Harry Potter book", "YouTube", "Facebook",
            "the first Star Wars film", "the compact disc", "the Game Boy", "the first Toy Story film",
            "the Nintendo Wii", "Google Maps")
RELEASE_TEMPLATES = ("When did {x} come out?", "What year was {x} released?", "when did {x} come out",
                     "In what year did {x} come out?", "When was {x} first released?")

#: (fills, templates) of every factual group above.
FACTUAL_GROUPS = ((EVENTS, EVENT_TEMPLATES), (WORKS, WORK_TEMPLATES), (MADE, MADE_TEMPLATES), (PLACES, PLACE_TEMPLATES),
                  (GAMES, GAME_TEMPLATES), (ARTWORKS, ARTWORK_TEMPLATES), (RELEASES, RELEASE_TEMPLATES))

#: Follow-ups that ask a checkable answer and lean on the question before them (the last few held out).
CHECKABLE_FOLLOW_UPS = ("When was she born?", "Where did he grow up?", "How old is he now?", "What year did it open?",
                        "How big is it?", "Who built it?", "What is it made of?", "Who was his wife?",
                        "What was her first novel?", "When did it end?", "Which river runs through it?",
                        "Who directed it?", "When was it released?", "Who was president then?",
                        "What team did he play for?", "How much does it weigh?", "How long did it take?",
                        "What did she discover?", "Where is he buried?", "How tall is it?", "What is his full name?",
                        "When did they win it?", "Who came second?", "What was the score?", "Which year was that in?",
                        "How deep is it?", "What language do they speak there?", "What currency do they use there?",
                        "And Portugal?", "And in 1990?", "What about Canada?", "And the capital of Peru?",
                        "what year was that", "who was his father", "And who was second?", "When did she die?",
                        "How many people lived there then?", "What about the second one?", "Where was it made?",
                        "Who owns it now?")
#: Follow-ups with no checkable answer (writing, opinions, more words, thanks), leaning on the turn before.
UNCHECKABLE_FOLLOW_UPS = ("Thanks, that's helpful.", "Why?", "Tell me more about him.", "Write a song about it.",
                          "What do you think of her?", "That's interesting.", "Can you say that more simply?",
                          "Explain it to me like I'm five.", "Write a limerick about that.", "Make it shorter.",
                          "Can you give me an example of that?", "How can I learn more about it?",
                          "What should I read about him?", "Help me write an essay about it.", "I didn't know that!",
                          "Ok cool.", "Wow, really?", "Do you like it?", "Tell me a story about them.",
                          "Why does it matter so much?", "Summarise that for me.", "Could you expand on that?",
                          "Give me a fun fact about it.", "Write a tweet about that.", "How should I visit it?",
                          "That's all, thank you.", "Why do people care about that?", "Say it again in French.")
#: Follow-ups held out of training per list (the last ones).
HELD_OUT_FOLLOW_UPS = 6
#: Previous questions each follow-up is paired with (seeded choice among the factual questions).
FOLLOW_UP_PAIRS = 5
