"""Non-algorithm glue of the Streamlit app (``app.py`` + ``pages/``).

* :mod:`.jobs`: background job manager (worker threads writing to the run store);
* :mod:`.forms`: widget specs from method configs, form validation, safe uploads;
* :mod:`.charts`: plotly figures and tables from run-store data;
* :mod:`.notes`: short teaching notes;
* :mod:`.resources`: Streamlit-specific helpers (the ``st.cache_resource`` manager, drawing
  one run). Only this module imports streamlit.

Everything algorithmic comes from the rest of :mod:`mixdp_core`.
"""

from .jobs import Job, JobManager

__all__ = ["Job", "JobManager"]
