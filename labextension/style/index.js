import './base.css';
import './notebook.css';
