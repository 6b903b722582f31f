"""MixDP Explorer core library.

Data flows through the sub-packages in this order:
``data -> encoders -> features (cache) -> methods -> accounting -> evaluation -> runs``.
The Streamlit app (``app.py`` + ``pages/``) only reads widgets, builds configs, starts jobs
and draws; all algorithm code lives here.
"""

__version__ = "0.1.0"
