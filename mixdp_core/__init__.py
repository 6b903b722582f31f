"""MixDP Explorer core library.

Data flows through the sub-packages in this order:
``data -> encoders -> features (cache) -> methods -> evaluation -> runs -> app_support / cli``,
every private method calibrated by ``accounting``. Imports follow the layers of README's
architecture table (``tests/test_layers.py``): ``accounting`` sits below ``methods`` (the methods
import it, it imports nothing of theirs). The Streamlit app (``app.py`` + ``pages/``) only reads widgets, builds configs, starts jobs
and draws; all algorithm code lives here.
"""

__version__ = "0.1.0"
